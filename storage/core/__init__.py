"""The ground every other part stands on: the errors storage raises (errors), how BSON values are
named, tested and rendered (values), MongoDB's memory and nesting limits (limits), the operation
token long loops check (interrupt), client documents on their way in (documents), ICU collations
(collation), and everything POSIX-only (portability, its one home). It imports no other part of
storage."""

"""Time to live: the facts a record carries for expiry and `expired`, the one predicate that decides
whether a document is gone (ttl), the date-like strings a TTL index meets (date_strings), and the
reasons ttlStatus gives for each document (status). It may import core, query and catalog."""

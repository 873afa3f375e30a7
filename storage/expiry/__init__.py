"""Time to live: the facts a record carries for expiry and `expired`, the one predicate that decides
whether a document is gone (ttl), the one parser of the `expireAfterSeconds` option (expire_after;
its value type, ExpireAfter, is the catalog's, since the catalog's records carry it), the
date-like strings a TTL index meets (date_strings), and the reasons ttlStatus gives for each
document (status). It may import core, query and catalog."""

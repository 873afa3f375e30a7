"""ebbdb's only async package: the server around storage/ and protocol/."""

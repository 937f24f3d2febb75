"""Root orchestrators: the routing policies over the one sub-agent pool."""

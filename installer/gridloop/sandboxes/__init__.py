"""Who may drive a sandbox: the router's scoped tokens, minted per claim (docs/security.md)."""

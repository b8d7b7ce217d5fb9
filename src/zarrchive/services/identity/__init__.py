"""Who is asking: accounts and their approval, API keys with scopes, callers and their
rights, identities from OpenID Connect sign-in, web sessions.

One module per concept; import the module itself (this package re-exports nothing).
"""

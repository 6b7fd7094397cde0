"""The MCP adapter: the tool definitions, the server over a backend, and the stdio proxy."""

"""pytest plugin placeholder (fixtures arrive with the client issue)."""

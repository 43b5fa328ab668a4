"""HTTP to agents: URLs, the HTTP/1.1 client, whole-request deadlines, headers and their redaction."""

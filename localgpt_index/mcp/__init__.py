"""`lgpt-index mcp`: the index as an MCP server (the official Python SDK), for desktop agents and answerers.

    runner   stdio (the default) or streamable HTTP on serve's hardened HTTP layer; the seam for companions (--watch)
    stdio    the SDK's stdio transport, with a JSON-RPC error for each line it cannot read
    server   the MCPServer and its four read-only tools, typed inputs and outputs, errors as tool errors
    backend  what the tools do: serve's warm service (model once, HEAD followed), its path policy
    images   page images rendered as serve renders them, scaled down to fit the caps
    schemas  the tools' output models and the image caps

Nothing is imported here: the CLI imports the SDK only when the command runs."""

"""Official Python SDK server whose tool pings the client (MCP: the
receiver MUST answer a ping) and one that asks for roots."""
import sys
from mcp.server.mcpserver import MCPServer, Context
from mcp.types import ToolAnnotations

server = MCPServer("ping-test")
RO = ToolAnnotations(readOnlyHint=True)


@server.tool(annotations=RO)
async def pinged(ctx: Context) -> str:
    """Ping the client, then answer."""
    await ctx.session.send_ping()
    return "pong"


@server.tool(annotations=RO)
def hello() -> str:
    """Say hello."""
    return "hello"


server.run()

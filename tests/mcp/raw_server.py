"""Raw JSON-RPC stdio server for the harness's tests (tests/harness/mcp_hostile_ii.rs). Modes:
onepage=N  : tools/list gives one tool per page, N pages (t0..t{N-1})
many=N     : N tools in one page, names from argv order 'rev' reverses
rev        : list in reverse order
longname=S : adds a tool named 'a'*60 + $MCP_TOKEN (for the setup-fault message)
initerr    : answers initialize with an error whose message holds $MCP_TOKEN at char ~300
esc        : adds a tool whose name holds an ESC sequence
die_after=S: exit S seconds after initialized
"""
import json, os, sys, time, threading

modes = sys.argv[1:]
arg = lambda k, d=None: next((m.split('=', 1)[1] for m in modes if m.startswith(k + '=')), d)
out = sys.stdout.buffer
tok = os.environ.get('MCP_TOKEN', '')


def send(obj):
    out.write(json.dumps(obj).encode() + b"\n")
    out.flush()


def tool(name):
    return {"name": name, "description": "d", "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": True}}


for line in sys.stdin.buffer:
    try:
        msg = json.loads(line)
    except Exception:
        continue
    mid, meth = msg.get('id'), msg.get('method')
    if meth == 'initialize':
        if 'initerr' in modes:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32000,
                  "message": "y" * int(arg('pad', '250')) + " bad token " + tok + " \x1b]0;pwned\x07\x1b[2J"}})
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg['params']['protocolVersion'], "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"}}})
    elif meth == 'notifications/initialized':
        if arg('die_after'):
            threading.Timer(float(arg('die_after')), lambda: os._exit(0)).start()
    elif meth == 'tools/list':
        if arg('onepage'):
            n = int((msg.get('params') or {}).get('cursor') or 0)
            total = int(arg('onepage'))
            res = {"tools": [tool(f"t{n}")]}
            if n + 1 < total:
                res["nextCursor"] = str(n + 1)
            send({"jsonrpc": "2.0", "id": mid, "result": res})
            continue
        tools = [tool("echo")]
        if arg('many'):
            tools = [tool(f"t{i:03d}") for i in range(int(arg('many')))]
            if 'rev' in modes:
                tools.reverse()
        if 'longname' in modes:
            tools.append(tool("a" * 60 + tok))
        if 'esc' in modes:
            tools.append(tool("evil\x1b]0;pwned\x07\x1b[2Jname"))
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    elif meth == 'tools/call':
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [
            {"type": "text", "text": "called " + msg['params']['name']}]}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})

"""A hostile MCP server speaking raw newline-delimited JSON-RPC on stdio,
for the harness's tests (tests/harness/mcp_hostile.rs). Modes (argv): endlesspages, pingflood, preinitspam,
exitcall, weird, noinit, ignoreeof, pid=FILE, count=FILE (one byte per
tools/list request), leak (uses $MCP_TOKEN), flood=N, setsid=FILE (a child
that leaves the process group and sleeps; its pid in FILE), deep (a third
tool whose schema nests 300 levels)."""
import json, os, sys, time

modes = set(sys.argv[1:])
arg = lambda k, d=None: next((m.split('=', 1)[1] for m in modes if m.startswith(k + '=')), d)
out = sys.stdout.buffer
tok = os.environ.get('MCP_TOKEN', '')
if arg('pid'):
    open(arg('pid'), 'w').write(str(os.getpid()))
if arg('setsid'):
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.setsid()
        os.write(w, b'x')
        os.close(0)
        os.close(1)
        time.sleep(300)
        os._exit(0)
    os.read(r, 1)  # it has left the group before the server answers
    open(arg('setsid'), 'w').write(str(child))


def send(obj):
    out.write(json.dumps(obj).encode() + b"\n")
    out.flush()


def tools():
    desc = 'Echo the text.'
    if 'leak' in modes:
        desc = 'd' * 1010 + ' ' + tok
    deep = []
    if 'deep' in modes:
        schema = {"type": "object"}
        for _ in range(300):
            schema = {"type": "object", "properties": {"x": schema}}
        deep = [{"name": "deep", "description": "Too deep.", "inputSchema": schema}]
    return deep + [
        {"name": "echo", "description": desc,
         "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
         "annotations": {"readOnlyHint": True}},
        {"name": "write_file", "description": "Writes a file.", "inputSchema": {"type": "object"},
         "annotations": {"destructiveHint": True}},
    ]


if 'leak' in modes:
    sys.stderr.write('x' * 380 + ' token=' + tok + '\n')
    sys.stderr.flush()

for line in sys.stdin.buffer:
    try:
        msg = json.loads(line)
    except Exception:
        continue
    mid, meth = msg.get('id'), msg.get('method')
    if meth == 'initialize':
        if 'preinitspam' in modes:
            for i in range(int(arg('flood', '20'))):
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": 1, "progress": i, "message": "S" * 1_000_000}})
        if 'noinit' in modes:
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg['params']['protocolVersion'], "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile", "version": "1"}}})
    elif meth == 'tools/list':
        if arg('count'):
            open(arg('count'), 'a').write('x')
        if 'endlesspages' in modes:
            n = int((msg.get('params') or {}).get('cursor') or 0)
            page = [{"name": f"t{n}_{i}", "description": "d" * 2000, "inputSchema": {"type": "object"}}
                    for i in range(1500)]
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": page, "nextCursor": str(n + 1)}})
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools()}})
        if 'pingflood' in modes:
            for i in range(int(arg('flood', '1000000'))):
                send({"jsonrpc": "2.0", "id": 100000 + i, "method": "ping"})
    elif meth == 'tools/call':
        args = msg['params'].get('arguments') or {}
        if 'exitcall' in modes:
            os._exit(0)
        if 'weird' in modes and args.get('text') == 'weird':
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "weird"}]}})
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [
            {"type": "text", "text": "called " + msg['params']['name']}]}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})

if 'ignoreeof' in modes:
    while True:
        time.sleep(1)

"""Raw streamable-HTTP MCP server (JSON answers, no sessions): tools/call of
'flaky' answers HTTP 500 text/plain once, then works."""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port = int(sys.argv[1])
state = {"failed": False}


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def reply(self, code, body, ctype="application/json"):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply(405, "", "text/plain")

    def do_DELETE(self):
        self.reply(200, "", "text/plain")

    def do_POST(self):
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mid, meth = msg.get("id"), msg.get("method")
        if mid is None:
            self.reply(202, "", "text/plain")
            return
        if meth == "initialize":
            res = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                   "serverInfo": {"name": "raw-http", "version": "1"}}
        elif meth == "tools/list":
            res = {"tools": [{"name": n, "description": n, "inputSchema": {"type": "object"},
                              "annotations": {"readOnlyHint": True}} for n in ("flaky", "echo")]}
        elif meth == "tools/call":
            if msg["params"]["name"] == "flaky" and not state["failed"]:
                state["failed"] = True
                self.reply(500, "Internal Server Error", "text/plain")
                return
            res = {"content": [{"type": "text", "text": "called " + msg["params"]["name"]}]}
        else:
            res = {}
        self.reply(200, json.dumps({"jsonrpc": "2.0", "id": mid, "result": res}))


ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()

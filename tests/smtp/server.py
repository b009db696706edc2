"""A real SMTP server for the harness's mail tests (tests/harness/mail.rs,
tests/harness/digest.rs): PyPI's aiosmtpd on 127.0.0.1:PORT, without TLS
(so it offers no STARTTLS) unless given a certificate. Each message it takes is read back with
Python's own email parser and appended to OUT as one JSON line: the
envelope, the login used, the decoded subject and body, the Message-ID,
the content type, charset and transfer encoding (the body's line ends as LF). Prints "ready" once it listens; stops on
SIGTERM or SIGINT.

    server.py PORT OUT [--refuse] [--login USER:PASSWORD]
              [--cert PEM --key PEM [--implicit-tls]] [--stall-data SAID]
              [--echo-auth]

--refuse answers every recipient 550; --login requires that login (AUTH
over plain text, which only a server on loopback may take); --cert and
--key serve that certificate, offering STARTTLS and requiring it before
MAIL, or with --implicit-tls speaking TLS from the first byte (smtps);
--echo-auth refuses a wrong login with a reply that quotes the AUTH PLAIN
argument (base64 of NUL user NUL password), as some servers do;
--stall-data writes "DATA received" to SAID once a message's data is in,
then never answers it (the test waits for that line, not for a time)."""
import asyncio
import argparse
import base64
import email
import email.policy
import json
import signal
import ssl

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

parser = argparse.ArgumentParser()
parser.add_argument("port", type=int)
parser.add_argument("out")
parser.add_argument("--refuse", action="store_true")
parser.add_argument("--login")
parser.add_argument("--cert")
parser.add_argument("--key")
parser.add_argument("--implicit-tls", action="store_true")
parser.add_argument("--stall-data")
parser.add_argument("--echo-auth", action="store_true")
args = parser.parse_args()


class Keep:
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if args.refuse:
            return "550 5.1.1 no such mailbox here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        if args.stall_data:
            with open(args.stall_data, "a", encoding="utf-8") as said:
                said.write("DATA received\n")
            await asyncio.sleep(3600)
        raw = envelope.original_content or envelope.content
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        login = getattr(session, "auth_data", None)
        line = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "login": login.login.decode() if isinstance(login, LoginPassword) else None,
            "from": str(msg["from"]),
            "to": str(msg["to"]),
            "subject": str(msg["subject"]),
            "message_id": msg["message-id"] and str(msg["message-id"]),
            "content_type": msg.get_content_type(),
            "charset": msg.get_content_charset(),
            "transfer_encoding": msg.get("content-transfer-encoding"),
            # The wire's CRLF line ends, as the text was written.
            "body": msg.get_content().replace("\r\n", "\n"),
        }
        with open(args.out, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
        return "250 2.0.0 accepted"


def authenticator(server, session, envelope, mechanism, auth_data):
    user, _, password = (args.login or "").partition(":")
    ok = (
        isinstance(auth_data, LoginPassword)
        and auth_data.login.decode() == user
        and auth_data.password.decode() == password
    )
    if not ok and args.echo_auth and isinstance(auth_data, LoginPassword):
        said = base64.b64encode(b"\0" + auth_data.login + b"\0" + auth_data.password).decode()
        return AuthResult(success=False, handled=False, message=f"535 5.7.8 rejected credentials {said}")
    return AuthResult(success=ok, auth_data=auth_data)


extra = {}
if args.login:
    extra = {"authenticator": authenticator, "auth_required": True, "auth_require_tls": False}
if args.cert:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    if args.implicit_tls:
        extra["ssl_context"] = context
    else:
        extra.update(tls_context=context, require_starttls=True)
# Blocked before the server's thread starts, so only sigwait takes them.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
controller = Controller(Keep(), hostname="127.0.0.1", port=args.port, **extra)
controller.start()
print("ready", flush=True)
signal.sigwait([signal.SIGTERM, signal.SIGINT])
controller.stop()

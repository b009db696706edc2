//! The one TLS configuration every client of the harness is built on
//! (`base::http::client`): a handshake happens, and a certificate no
//! bundled root vouches for is refused — here a self-signed one for
//! 127.0.0.1, served by Python's `ssl` (`tests/fixtures/tls/`).

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

/// An HTTPS server on 127.0.0.1 with the self-signed certificate; its port.
fn self_signed_server() -> (Child, u16) {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");
    let script = format!(
        "import http.server, ssl, sys\n\
         s = http.server.HTTPServer(('127.0.0.1', 0), http.server.SimpleHTTPRequestHandler)\n\
         c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
         c.load_cert_chain('{fixtures}/self-signed.pem', '{fixtures}/self-signed.key')\n\
         s.socket = c.wrap_socket(s.socket, server_side=True)\n\
         print(s.server_address[1], flush=True)\n\
         s.serve_forever()\n"
    );
    let mut child = Command::new("python3")
        .args(["-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line.trim().parse().unwrap())
}

#[tokio::test]
async fn a_certificate_no_bundled_root_vouches_for_is_refused() {
    let (mut server, port) = self_signed_server();
    let client = agent_harness::base::http::client()
        .unwrap()
        .build()
        .unwrap();
    let err = client
        .get(format!("https://127.0.0.1:{port}/"))
        .send()
        .await
        .expect_err("an untrusted certificate");
    let mut chain = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(e) = source {
        chain.push_str(&format!(" <- {e}"));
        source = e.source();
    }
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(chain.contains("invalid peer certificate"), "{chain}");
    assert!(chain.contains("UnknownIssuer"), "{chain}");
}

//! webfetch against local servers (docs/tools.md, "webfetch";
//! `[tools.webfetch]`).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_harness::base::http::Trust;
use agent_harness::config::{Redactor, WebfetchConfig};
use agent_harness::tools::ToolOutput;
use agent_harness::tools::webfetch::Webfetch;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{assert_contains, final_answer, scenario, tool_calls};

/// `[tools.webfetch]` with no host lists, not using `ca_file`.
fn config(allow_private: bool, max_bytes: u64, timeout_secs: u64) -> WebfetchConfig {
    WebfetchConfig {
        timeout_secs,
        max_bytes,
        allow_private,
        allow_hosts: vec![],
        deny_hosts: vec![],
        use_ca_file: false,
    }
}

fn fetcher(allow_private: bool, max_bytes: u64, timeout_secs: u64) -> Webfetch {
    Webfetch::new(
        &config(allow_private, max_bytes, timeout_secs),
        &Trust::bundled(),
    )
    .unwrap()
}

async fn serve(route: &str, response: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(route))
        .respond_with(response)
        .mount(&server)
        .await;
    server
}

/// `server` answers `response` at `route`, whatever the method.
async fn mount(server: &MockServer, route: &str, response: ResponseTemplate) {
    Mock::given(path(route))
        .respond_with(response)
        .mount(server)
        .await;
}

/// A 200 of `content_type` with `body`.
fn page(body: impl Into<Vec<u8>>, content_type: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body, content_type)
}

/// A redirect (`status`) to `to`.
fn moved(status: u16, to: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).insert_header("location", to)
}

/// What `f` brings back from `url`, from its start, up to 6000 characters.
async fn fetch(f: &Webfetch, url: &str) -> ToolOutput {
    f.fetch(url, 0, 6000, &Redactor::default()).await
}

/// `route` on `server` fetched by a fetcher that allows private addresses
/// and reads whole pages.
async fn fetch_at(server: &MockServer, route: &str) -> ToolOutput {
    let url = format!("{}{route}", server.uri());
    fetch(&fetcher(true, 2_000_000, 5), &url).await
}

#[tokio::test]
async fn a_page_comes_back_as_clean_text_with_a_header() {
    let html = "<html><head><script>var x=1;</script></head><body><nav>Menu</nav><h1>Title</h1><p>Body text.</p></body></html>";
    let server = serve("/page", page(html, "text/html; charset=utf-8")).await;
    let out = fetch_at(&server, "/page").await;
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(
        out.text,
        format!(
            "URL: {}/page\nStatus: 200\nContent-Type: text/html\nLength: 19 characters\n\n# Title\n\nBody text.",
            server.uri()
        )
    );
}

#[tokio::test]
async fn a_missing_page_says_its_status_in_words() {
    let server = serve("/gone", ResponseTemplate::new(404)).await;
    let url = format!("{}/gone", server.uri());
    let out = fetcher(true, 1000, 5)
        .fetch(&url, 0, 6000, &Redactor::default())
        .await;
    assert!(out.is_error);
    assert!(
        out.text.starts_with(&format!(
            "URL: {url}\nStatus: 404 Not Found (the page could not be fetched)\n"
        )),
        "{}",
        out.text
    );
    // The line a small model repeats as its answer says the same.
    assert!(
        out.text.ends_with("\n(no page: it could not be fetched)"),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn the_declared_charset_is_honoured_and_json_passes_through() {
    let latin = page(b"caf\xe9".to_vec(), "text/plain; charset=iso-8859-1");
    let server = serve("/latin", latin).await;
    let out = fetch_at(&server, "/latin").await;
    assert!(out.text.ends_with("\n\ncafé"), "{}", out.text);
    let server = serve("/j", page(r#"{"a": 1}"#, "application/json")).await;
    let out = fetch_at(&server, "/j").await;
    assert!(out.text.ends_with("\n\n{\"a\": 1}"), "{}", out.text);
}

#[tokio::test]
async fn binary_types_are_refused_with_their_type() {
    let server = serve("/img", page(vec![0x89, b'P', b'N', b'G'], "image/png")).await;
    let out = fetch_at(&server, "/img").await;
    assert!(out.is_error);
    assert_contains(&out.text, "is image/png, which cannot be read as text");
}

#[tokio::test]
async fn redirects_are_followed_up_to_five() {
    let server = MockServer::start().await;
    for i in 0..7 {
        let to = format!("{}/r{}", server.uri(), i + 1);
        mount(&server, &format!("/r{i}"), moved(302, &to)).await;
    }
    mount(&server, "/r3x", page("arrived", "text/plain")).await;
    mount(&server, "/hop", moved(301, "/r3x")).await;
    let out = fetch_at(&server, "/hop").await;
    let arrived = format!("URL: {}/r3x\n", server.uri());
    assert!(out.text.starts_with(&arrived), "{}", out.text);
    let out = fetch_at(&server, "/r0").await;
    assert!(out.is_error, "{}", out.text);
    assert_contains(&out.text, "more than 5 redirects");
}

#[tokio::test]
async fn with_the_guard_on_a_loopback_server_receives_no_request() {
    let server = serve("/secret", page("secret", "text/plain")).await;
    let port = server.address().port();
    let f = fetcher(false, 1000, 5);
    for url in [
        format!("http://127.0.0.1:{port}/secret"),
        format!("http://localhost:{port}/secret"),
        format!("http://2130706433:{port}/secret"),
        format!("http://[::ffff:127.0.0.1]:{port}/secret"),
    ] {
        let out = fetch(&f, &url).await;
        assert!(
            out.is_error && out.text.starts_with("Refused to fetch"),
            "{url}: {}",
            out.text
        );
    }
    assert!(server.received_requests().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_address_in_its_ipv6_spelling_is_refused_to_the_model() {
    // Loopback is allowed here: only the deny list stands between the
    // model and the server, and it names the address in its IPv4 spelling.
    let server = serve("/secret", page("secret", "text/plain")).await;
    let port = server.address().port();
    let urls = [
        format!("http://[::ffff:127.0.0.1]:{port}/secret"),
        format!("http://[::ffff:7f00:1]:{port}/secret"),
        format!("http://[64:ff9b::7f00:1]:{port}/secret"),
        format!("http://[::127.0.0.1]:{port}/secret"),
    ];
    let calls: Vec<_> = ["c0", "c1", "c2", "c3"]
        .into_iter()
        .zip(&urls)
        .map(|(id, url)| (id, "webfetch", serde_json::json!({ "url": url })))
        .collect();
    let s = scenario()
        .replies(vec![tool_calls(&calls), final_answer("done")])
        .task("t", "Fetch the page.")
        .config("[tools.webfetch]\nallow_private = true\ndeny_hosts = [\"127.0.0.1\"]")
        .ran()
        .await;

    let lines = s.tool_lines("t");
    assert_eq!(lines.len(), urls.len());
    for (line, url) in lines.iter().zip(&urls) {
        assert!(line.is_error, "{url}: {}", line.result);
        let refused = format!("Refused to fetch {url}: ");
        assert!(line.result.starts_with(&refused), "{}", line.result);
        assert_contains(&line.result, "is on the deny list");
    }
    assert!(server.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_redirect_outside_the_allow_list_is_refused() {
    // Local servers are private addresses, so the first hop needs
    // allow_private; what refuses the redirect here is the allow list. (The
    // address rule on redirects is tested where it can be alone: in
    // `tools::webfetch`'s unit tests.)
    let target = serve("/x", page("inner", "text/plain")).await;
    let start = MockServer::start().await;
    let to = format!(
        "http://169.254.169.254/latest/meta-data/?via={}",
        target.uri()
    );
    mount(&start, "/go", moved(302, &to)).await;
    let mut allowing_loopback = config(true, 1000, 5);
    allowing_loopback.allow_hosts = vec!["127.0.0.1".into()];
    let f = Webfetch::new(&allowing_loopback, &Trust::bundled()).unwrap();
    let out = fetch(&f, &format!("{}/go", start.uri())).await;
    assert!(out.is_error, "{}", out.text);
    assert_contains(&out.text, "a redirect was refused");
}

/// A server on a loopback port sending a `total`-byte body as fast as it
/// is read: its port, and how many bytes it has written so far.
fn serve_a_body_of(total: usize) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let written = Arc::new(AtomicUsize::new(0));
    let counter = written.clone();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf);
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {total}\r\n\r\n"
        );
        let chunk = vec![b'a'; 64 * 1024];
        while counter.load(Ordering::SeqCst) < total {
            match s.write(&chunk) {
                Ok(n) => counter.fetch_add(n, Ordering::SeqCst),
                Err(_) => break,
            };
        }
    });
    (port, written)
}

#[tokio::test]
async fn a_multi_megabyte_body_is_not_read_past_max_bytes() {
    let total = 64 * 1024 * 1024;
    let (port, written) = serve_a_body_of(total);
    let url = format!("http://127.0.0.1:{port}/big");
    let out = fetcher(true, 100_000, 10)
        .fetch(&url, 0, 2000, &Redactor::default())
        .await;
    assert!(
        out.text
            .contains("Length: 100000 characters (body cut at 100000 bytes)"),
        "{}",
        &out.text[..200]
    );
    std::thread::sleep(Duration::from_millis(300));
    let sent = written.load(Ordering::SeqCst);
    assert!(sent < total / 2, "the server sent {sent} bytes");
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // The server closes the connection after 5 s without a byte: a fetch
    // that did not time out first ends on the closed connection instead.
    let _keep = std::thread::spawn(move || {
        let conn = listener.accept();
        std::thread::sleep(Duration::from_secs(5));
        drop(conn);
    });
    let url = format!("http://127.0.0.1:{port}/");
    let out = fetcher(true, 1000, 1)
        .fetch(&url, 0, 2000, &Redactor::default())
        .await;
    assert!(
        out.is_error && out.text.starts_with(&format!("Fetching {url} timed out")),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn the_shipped_example_page_comes_back_as_clean_compact_text() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/pages/llama-server.html"
    );
    let html = page(std::fs::read(file).unwrap(), "text/html; charset=utf-8");
    let server = serve("/llama-server.html", html).await;
    let out = fetch_at(&server, "/llama-server.html").await;
    assert!(!out.is_error, "{}", out.text);
    let text = out.text.split_once("\n\n").unwrap().1;
    // Script, style, header, navigation and footer gone; headings, the list
    // and the link target kept, compactly.
    assert_eq!(
        text,
        "# Running llama-server for batch jobs\n\n\
         llama.cpp's `llama-server` speaks the OpenAI chat API, so a batch harness can drive it with plain HTTP requests.\n\n\
         ## Flags that matter\n\
         * `--jinja` with `--chat-template-file` turns on tool calls.\n\
         * `-c 8192` sets the context window; read it back from `/props`.\n\
         * `-np 1` gives the whole context to one slot.\n\n\
         ## Health\n\n\
         Wait for `GET /health` to answer 200 before sending work. The [server README][1] lists every route.\n\n\
         [1]: https://github.com/ggml-org/llama.cpp/tree/master/tools/server"
    );
    let length = format!("Length: {} characters", text.chars().count());
    assert_contains(&out.text, &length);
}

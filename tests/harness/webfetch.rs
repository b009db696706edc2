//! webfetch against local servers (docs/tools.md, "webfetch";
//! `[tools.webfetch]`).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_harness::base::http::Trust;
use agent_harness::config::{Redactor, WebfetchConfig};
use agent_harness::tools::webfetch::Webfetch;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn fetcher(allow_private: bool, max_bytes: u64, timeout_secs: u64) -> Webfetch {
    Webfetch::new(
        &WebfetchConfig {
            timeout_secs,
            max_bytes,
            allow_private,
            allow_hosts: vec![],
            deny_hosts: vec![],
            use_ca_file: false,
        },
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

#[tokio::test]
async fn a_page_comes_back_as_clean_text_with_a_header() {
    let html = "<html><head><script>var x=1;</script></head><body><nav>Menu</nav><h1>Title</h1><p>Body text.</p></body></html>";
    let server = serve(
        "/page",
        ResponseTemplate::new(200).set_body_raw(html, "text/html; charset=utf-8"),
    )
    .await;
    let out = fetcher(true, 2_000_000, 5)
        .fetch(
            &format!("{}/page", server.uri()),
            0,
            6000,
            &Redactor::default(),
        )
        .await;
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
    let server = serve(
        "/latin",
        ResponseTemplate::new(200)
            .set_body_raw(b"caf\xe9".to_vec(), "text/plain; charset=iso-8859-1"),
    )
    .await;
    let out = fetcher(true, 1000, 5)
        .fetch(
            &format!("{}/latin", server.uri()),
            0,
            6000,
            &Redactor::default(),
        )
        .await;
    assert!(out.text.ends_with("\n\ncafé"), "{}", out.text);
    let server = serve(
        "/j",
        ResponseTemplate::new(200).set_body_raw(r#"{"a": 1}"#, "application/json"),
    )
    .await;
    let out = fetcher(true, 1000, 5)
        .fetch(
            &format!("{}/j", server.uri()),
            0,
            6000,
            &Redactor::default(),
        )
        .await;
    assert!(out.text.ends_with("\n\n{\"a\": 1}"), "{}", out.text);
}

#[tokio::test]
async fn binary_types_are_refused_with_their_type() {
    let server = serve(
        "/img",
        ResponseTemplate::new(200).set_body_raw(vec![0x89, b'P', b'N', b'G'], "image/png"),
    )
    .await;
    let out = fetcher(true, 1000, 5)
        .fetch(
            &format!("{}/img", server.uri()),
            0,
            6000,
            &Redactor::default(),
        )
        .await;
    assert!(out.is_error);
    assert!(
        out.text
            .contains("is image/png, which cannot be read as text"),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn redirects_are_followed_up_to_five() {
    let server = MockServer::start().await;
    for i in 0..7 {
        let to = format!("{}/r{}", server.uri(), i + 1);
        Mock::given(path(format!("/r{i}")))
            .respond_with(ResponseTemplate::new(302).insert_header("location", to.as_str()))
            .mount(&server)
            .await;
    }
    Mock::given(path("/r3x"))
        .respond_with(ResponseTemplate::new(200).set_body_raw("arrived", "text/plain"))
        .mount(&server)
        .await;
    Mock::given(path("/hop"))
        .respond_with(ResponseTemplate::new(301).insert_header("location", "/r3x"))
        .mount(&server)
        .await;
    let f = fetcher(true, 1000, 5);
    let out = f
        .fetch(
            &format!("{}/hop", server.uri()),
            0,
            6000,
            &Redactor::default(),
        )
        .await;
    assert!(
        out.text
            .starts_with(&format!("URL: {}/r3x\n", server.uri())),
        "{}",
        out.text
    );
    let out = f
        .fetch(
            &format!("{}/r0", server.uri()),
            0,
            6000,
            &Redactor::default(),
        )
        .await;
    assert!(
        out.is_error && out.text.contains("more than 5 redirects"),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn with_the_guard_on_a_loopback_server_receives_no_request() {
    let server = serve(
        "/secret",
        ResponseTemplate::new(200).set_body_raw("secret", "text/plain"),
    )
    .await;
    let port = server.address().port();
    let f = fetcher(false, 1000, 5);
    for url in [
        format!("http://127.0.0.1:{port}/secret"),
        format!("http://localhost:{port}/secret"),
        format!("http://2130706433:{port}/secret"),
        format!("http://[::ffff:127.0.0.1]:{port}/secret"),
    ] {
        let out = f.fetch(&url, 0, 6000, &Redactor::default()).await;
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
    let server = serve(
        "/secret",
        ResponseTemplate::new(200).set_body_raw("secret", "text/plain"),
    )
    .await;
    let port = server.address().port();
    let urls = [
        format!("http://[::ffff:127.0.0.1]:{port}/secret"),
        format!("http://[::ffff:7f00:1]:{port}/secret"),
        format!("http://[64:ff9b::7f00:1]:{port}/secret"),
        format!("http://[::127.0.0.1]:{port}/secret"),
    ];
    let ids: Vec<String> = (0..urls.len()).map(|i| format!("c{i}")).collect();
    let calls: Vec<(&str, &str, serde_json::Value)> = ids
        .iter()
        .zip(&urls)
        .map(|(id, url)| (id.as_str(), "webfetch", serde_json::json!({ "url": url })))
        .collect();
    let s = crate::common::scenario()
        .replies(vec![
            crate::common::tool_calls(&calls),
            crate::common::final_answer("done"),
        ])
        .task("t", "Fetch the page.")
        .config("[tools.webfetch]\nallow_private = true\ndeny_hosts = [\"127.0.0.1\"]")
        .build()
        .await;

    s.run().await;

    let lines = s.tool_lines("t");
    assert_eq!(lines.len(), urls.len());
    for (line, url) in lines.iter().zip(&urls) {
        assert!(
            line.is_error
                && line
                    .result
                    .starts_with(&format!("Refused to fetch {url}: "))
                && line.result.contains("is on the deny list"),
            "{url}: {}",
            line.result
        );
    }
    assert!(server.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_redirect_outside_the_allow_list_is_refused() {
    // Local servers are private addresses, so the first hop needs
    // allow_private; what refuses the redirect here is the allow list. (The
    // address rule on redirects is tested where it can be alone: in
    // `tools::webfetch`'s unit tests.)
    let target = serve(
        "/x",
        ResponseTemplate::new(200).set_body_raw("inner", "text/plain"),
    )
    .await;
    let start = MockServer::start().await;
    let to = format!(
        "http://169.254.169.254/latest/meta-data/?via={}",
        target.uri()
    );
    Mock::given(path("/go"))
        .respond_with(ResponseTemplate::new(302).insert_header("location", to.as_str()))
        .mount(&start)
        .await;
    let f = Webfetch::new(
        &WebfetchConfig {
            timeout_secs: 5,
            max_bytes: 1000,
            allow_private: true,
            allow_hosts: vec!["127.0.0.1".into()],
            deny_hosts: vec![],
            use_ca_file: false,
        },
        &Trust::bundled(),
    )
    .unwrap();
    let out = f
        .fetch(
            &format!("{}/go", start.uri()),
            0,
            6000,
            &Redactor::default(),
        )
        .await;
    assert!(
        out.is_error && out.text.contains("a redirect was refused"),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn a_multi_megabyte_body_is_not_read_past_max_bytes() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let written = Arc::new(AtomicUsize::new(0));
    let counter = written.clone();
    let total = 64 * 1024 * 1024;
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
    let out = fetcher(true, 100_000, 10)
        .fetch(
            &format!("http://127.0.0.1:{port}/big"),
            0,
            2000,
            &Redactor::default(),
        )
        .await;
    assert!(
        out.text
            .contains("Length: 100000 characters (body cut at 100000 bytes)"),
        "{}",
        &out.text[..200]
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        written.load(Ordering::SeqCst) < total / 2,
        "the server sent {} bytes",
        written.load(Ordering::SeqCst)
    );
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
    let page = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pages/llama-server.html"),
    )
    .unwrap();
    let server = serve(
        "/llama-server.html",
        ResponseTemplate::new(200).set_body_raw(page.clone(), "text/html; charset=utf-8"),
    )
    .await;
    let out = fetcher(true, 2_000_000, 5)
        .fetch(
            &format!("{}/llama-server.html", server.uri()),
            0,
            6000,
            &Redactor::default(),
        )
        .await;
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
    assert!(
        out.text
            .contains(&format!("Length: {} characters", text.chars().count())),
        "{}",
        out.text
    );
}

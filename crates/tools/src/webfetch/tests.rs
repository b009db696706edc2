//! Unit tests of `tools::webfetch`.

use super::guard::AddressRules;
use super::html::strip_tags;
use super::*;

fn rules(allow_private: bool, allow: &[&str], deny: &[&str]) -> AddressRules {
    AddressRules {
        allow_private,
        allow_hosts: allow.iter().map(|s| s.to_string()).collect(),
        deny_hosts: deny.iter().map(|s| s.to_string()).collect(),
    }
}

fn check(r: &AddressRules, url: &str) -> Result<(), Refused> {
    r.check(&Url::parse(url).unwrap())
}

#[test]
fn private_and_reserved_addresses_are_refused_in_every_spelling() {
    let r = rules(false, &[], &[]);
    for url in [
        "http://127.0.0.1/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://127.1/",
        "http://0177.0.0.1/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://10.1.2.3/",
        "http://172.16.0.1/",
        "http://192.168.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.64.0.1/",
        "http://0.0.0.0/",
        "http://[::]/",
        "http://224.0.0.1/",
        "http://255.255.255.255/",
        "http://[fd00::1]/",
        "http://[fe80::1]/",
        "http://[ff02::1]/",
        "http://[::ffff:10.0.0.1]/",
        "http://[::ffff:169.254.169.254]/",
    ] {
        assert!(check(&r, url).is_err(), "{url} was allowed");
    }
    for url in [
        "http://93.184.216.34/",
        "https://[2606:4700::6810:85e5]/",
        "https://example.com/x",
    ] {
        assert_eq!(check(&r, url), Ok(()), "{url}");
    }
    assert_eq!(check(&rules(true, &[], &[]), "http://127.0.0.1/"), Ok(()));
}

#[test]
fn a_redirect_to_a_private_address_is_refused_by_the_address_check() {
    // No allow list: only the address rule can refuse these.
    let r = rules(false, &[], &[]);
    for to in [
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1:8080/admin",
        "http://[::ffff:10.0.0.1]/",
    ] {
        let e = r.redirect(1, &Url::parse(to).unwrap()).unwrap_err();
        assert!(
            e.0.starts_with("a redirect was refused: ") && e.0.contains("private or reserved"),
            "{to}: {e}"
        );
    }
    assert_eq!(
        r.redirect(1, &Url::parse("https://example.org/").unwrap()),
        Ok(())
    );
    assert!(
        r.redirect(
            MAX_REDIRECTS + 1,
            &Url::parse("https://example.org/").unwrap()
        )
        .unwrap_err()
        .0
        .contains("more than 5 redirects")
    );
}

#[test]
fn only_http_and_https_are_fetched() {
    let r = rules(true, &[], &[]);
    for url in [
        "file:///etc/passwd",
        "ftp://example.com/",
        "gopher://example.com/",
        "data:text/plain,hi",
    ] {
        assert!(check(&r, url).is_err(), "{url}");
    }
}

#[test]
fn host_lists_match_the_host_and_its_subdomains() {
    let r = rules(false, &["example.com"], &["bad.example.com"]);
    assert_eq!(check(&r, "https://example.com/"), Ok(()));
    assert_eq!(check(&r, "https://docs.example.com/"), Ok(()));
    assert!(check(&r, "https://bad.example.com/").is_err());
    assert!(check(&r, "https://x.bad.example.com/").is_err());
    assert!(check(&r, "https://notexample.com/").is_err());
    assert!(check(&r, "https://example.com.evil.org/").is_err());
}

#[test]
fn an_address_on_a_host_list_matches_in_every_spelling_a_url_can_carry() {
    // allow_private: only the deny list can refuse these.
    let deny = rules(true, &[], &["127.0.0.1"]);
    for url in [
        "http://127.0.0.1/",
        "http://127.0.0.1./",
        "http://2130706433/",
        "http://0x7f000001/",
        "http://0177.0.0.1/",
        "http://127.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]/",
        "http://[0:0:0:0:0:ffff:7f00:1]/",
        "http://[::127.0.0.1]/",
        "http://[::7f00:1]/",
        "http://[::ffff:0:127.0.0.1]/",
        "http://[64:ff9b::127.0.0.1]/",
        "http://[64:ff9b::7f00:1]/",
        // The unspecified address reaches this host.
        "http://0.0.0.0/",
        "http://0/",
        "http://[::ffff:0.0.0.0]/",
        "http://[::ffff:0:0]/",
    ] {
        let e = check(&deny, url).unwrap_err();
        assert!(e.0.ends_with("is on the deny list"), "{url}: {e}");
    }
    for url in [
        "http://127.0.0.2/",
        "http://[::ffff:127.0.0.2]/",
        "http://[::1]/",
        "http://[64:ff9c::7f00:1]/",
        "http://localhost/",
    ] {
        assert_eq!(check(&deny, url), Ok(()), "{url}");
    }
}

#[test]
fn an_address_entry_in_any_spelling_names_every_spelling_of_the_address() {
    // An entry in an IPv6 spelling names the IPv4 address too.
    for entry in [
        "::ffff:127.0.0.1",
        "[::ffff:7f00:1]",
        "64:ff9b::7f00:1",
        "127.1",
    ] {
        let r = rules(true, &[], &[entry]);
        assert!(check(&r, "http://127.0.0.1/").is_err(), "{entry}");
        assert!(check(&r, "http://[::ffff:127.0.0.1]/").is_err(), "{entry}");
    }
    // An IPv6 entry, in any of its spellings.
    for entry in ["::1", "[::1]", "0:0:0:0:0:0:0:1"] {
        let r = rules(true, &[], &[entry]);
        for url in [
            "http://[::]/",
            "http://[::1]/",
            "http://[0:0:0:0:0:0:0:1]/",
            "http://[0::01]/",
        ] {
            assert!(check(&r, url).is_err(), "{entry}: {url}");
        }
        assert_eq!(check(&r, "http://0.0.0.1/"), Ok(()), "{entry}");
        assert_eq!(check(&r, "http://[::2]/"), Ok(()), "{entry}");
    }
    // The allow list alike: the address in another spelling is on it.
    let allow = rules(false, &["93.184.216.34"], &[]);
    for url in [
        "http://93.184.216.34/",
        "http://1572395042/",
        "http://[::ffff:93.184.216.34]/",
    ] {
        assert_eq!(check(&allow, url), Ok(()), "{url}");
    }
    assert!(check(&allow, "http://93.184.216.35/").is_err());
    assert!(check(&allow, "http://example.com/").is_err());
    // A name entry never matches an address, nor an address entry a name.
    assert_eq!(
        check(&rules(true, &[], &["localhost"]), "http://127.0.0.1/"),
        Ok(())
    );
    assert_eq!(
        check(
            &rules(true, &[], &["127.0.0.1"]),
            "http://x.127.0.0.1.nip.io/"
        ),
        Ok(())
    );
}

#[test]
fn the_ipv4_translated_form_is_checked_as_its_ipv4_address() {
    let r = rules(false, &[], &[]);
    for url in [
        "http://[::ffff:0:127.0.0.1]/",
        "http://[::ffff:0:a00:1]/",
        "http://[::ffff:0:169.254.169.254]/",
    ] {
        let e = check(&r, url).unwrap_err();
        assert!(e.0.contains("private or reserved"), "{url}: {e}");
    }
    assert_eq!(check(&r, "http://[::ffff:0:93.184.216.34]/"), Ok(()));
}

proptest::proptest! {
    #[test]
    fn every_ipv6_spelling_of_a_denied_ipv4_address_is_denied(a: u8, b: u8, c: u8, d: u8, form in 0usize..5) {
        let v4 = std::net::Ipv4Addr::new(a, b, c, d);
        let [s6, s7] = [u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d])];
        let spelled = match form {
            0 => format!("::ffff:{v4}"),
            1 => format!("::ffff:{s6:x}:{s7:x}"),
            2 => format!("::ffff:0:{v4}"),
            3 => format!("64:ff9b::{s6:x}:{s7:x}"),
            _ => format!("0:0:0:0:0:ffff:{s6:x}:{s7:x}"),
        };
        let deny = rules(true, &[], &[&v4.to_string()]);
        let bracketed = format!("http://[{spelled}]/");
        let decimal = format!("http://{}/", u32::from(v4));
        proptest::prop_assert!(check(&deny, &bracketed).is_err(), "{}", bracketed);
        proptest::prop_assert!(check(&deny, &decimal).is_err(), "{}", decimal);
        let other = std::net::Ipv4Addr::from(u32::from(v4).wrapping_add(1));
        proptest::prop_assert_eq!(check(&deny, &format!("http://{other}/")), Ok(()));
    }
}

#[tokio::test]
async fn a_name_that_resolves_to_a_denied_address_is_refused_by_the_resolver() {
    use reqwest::dns::Resolve;
    let resolve = |deny: &[&str]| {
        let resolver = guard::GuardedResolver {
            rules: std::sync::Arc::new(rules(true, &[], deny)),
        };
        resolver.resolve("localhost".parse().unwrap())
    };
    // `localhost` resolves (from /etc/hosts) to loopback addresses only.
    let Err(e) = resolve(&["127.0.0.1", "::1"]).await else {
        panic!("localhost resolved past the deny list");
    };
    assert!(
        e.to_string().starts_with("localhost resolves to ")
            && e.to_string().ends_with("which is on the deny list"),
        "{e}"
    );
    let Ok(addrs) = resolve(&["::1"]).await else {
        panic!("127.0.0.1 is not denied");
    };
    let left: Vec<_> = addrs.map(|a| a.ip()).collect();
    assert!(
        !left.is_empty() && left.iter().all(|ip| ip.is_ipv4()),
        "{left:?}"
    );
}

#[test]
fn markup_too_deep_to_lay_out_is_stripped_to_its_text_in_linear_time() {
    let deep = format!(
        "{}deep text{}",
        "<ul><li>".repeat(200_000),
        "</li></ul>".repeat(200_000)
    );
    assert_eq!(markup_shape(&deep).depth, 200_000);
    let page = |html: String| {
        Download {
            final_url: "https://x.example/".into(),
            status: 200,
            mime: "text/html".into(),
            kind: Kind::Html,
            charset: None,
            body: html.into_bytes(),
            truncated: false,
        }
        .into_page()
        .text
    };
    assert_eq!(page(deep), "deep text");
    let flat = "<div><p>a<p>b<br><img src=x/><li>c</li></div>".repeat(1000);
    assert_eq!(markup_shape(&flat).depth, 1);
    assert_eq!(markup_shape(&flat).elements, 1000);
    assert_eq!(markup_shape("<a><b><c/></b></a>").depth, 2);
    assert_eq!(markup_shape(&"<a".repeat(100_000)).depth, 100_000);
    // End tags a parser ignores do not close anything.
    assert_eq!(markup_shape(&"<div></x>".repeat(10_000)).depth, 10_000);
    assert_eq!(markup_shape(&"<div><table></div>".repeat(1000)).depth, 2000);
    assert_eq!(
        markup_shape(&format!("<div>{}</div>", "<span>".repeat(40))).depth,
        41
    );
    assert_eq!(markup_shape("<div><span><b></div><i></i>").depth, 3);
    assert_eq!(page("<div></x>".repeat(10_000) + "end"), "end");
}

#[test]
fn pages_of_too_many_elements_are_stripped_and_lose_scripts_and_styles() {
    let many = "<i>x</i>".repeat(MAX_HTML_ELEMENTS + 1);
    assert_eq!(markup_shape(&many).depth, 1);
    assert_eq!(markup_shape(&many).elements, MAX_HTML_ELEMENTS + 1);
    let page = Download {
        final_url: "https://x.example/".into(),
        status: 200,
        mime: "text/html".into(),
        kind: Kind::Html,
        charset: None,
        body: format!("<SCRIPT>var a = '<i>';</SCRIPT><style>i {{}}</style>{many}").into_bytes(),
        truncated: false,
    }
    .into_page();
    assert_eq!(page.text.len(), 2 * (MAX_HTML_ELEMENTS + 1) - 1);
    assert!(page.text.starts_with("x x"));
    assert_eq!(strip_tags("a<script>never</script"), "a");
    assert_eq!(strip_tags("a <b>bold</b> <i unclosed"), "a bold");
}

#[test]
fn html_becomes_compact_readable_text() {
    let html = r#"<html><head><title>T</title><style>body{color:red}</style><script>alert(1)</script></head>
        <body><nav><a href="/">Home</a> | <a href="/about">About</a></nav><header>Site header</header>
        <main><h1>Evaluation</h1><p>Use <a href="https://example.org/paper">held-out</a> sets.</p>
        <ul><li>one</li><li>two</li></ul></main><footer>Copyright</footer></body></html>"#;
    let text = html_to_text(html);
    assert!(text.contains("# Evaluation"), "{text}");
    assert!(text.contains("held-out"), "{text}");
    assert!(text.contains("https://example.org/paper"), "{text}");
    assert!(text.contains("* one"), "{text}");
    for gone in ["alert", "color:red", "Home", "Site header", "Copyright"] {
        assert!(!text.contains(gone), "{gone} survived: {text}");
    }
}

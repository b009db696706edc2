//! Mail through `[mail]` (docs/operating.md, "Digest and mail"): a failed
//! run's result mailed with `on_failure_mail` (when a task failed or the
//! setup is wrong, never for a run a later one retries); STARTTLS required
//! unless turned off; a server whose certificate only a private CA signed,
//! over STARTTLS or `smtps://`, refused without `[tls] ca_file` and taking
//! the mail with it; a server that refuses, never greets, or is not there
//! at all is a warning and a count in `agent_harness_notify_failures_total`,
//! never the exit code; `check` warns of a `[mail]` nothing sends through.

use serde_json::json;
use wiremock::ResponseTemplate;

use crate::common::smtp::{Smtp, TO, digest_at, silent_server};
use crate::common::tls::PrivateCa;
use crate::common::*;

/// A model that refuses every request: each task fails (HTTP 400).
fn refusing() -> Vec<ResponseTemplate> {
    vec![ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad request"}}))]
}

/// The notifications that failed, as the metrics textfile counts them.
fn notify_failures(s: &Scene) -> String {
    let metrics = std::fs::read_to_string(s.root().join("logs/agent-harness.prom")).unwrap();
    metrics
        .lines()
        .find(|l| l.starts_with("agent_harness_notify_failures_total "))
        .unwrap_or("(no agent_harness_notify_failures_total)")
        .to_string()
}

#[tokio::test]
#[ignore = "needs scripts/test: aiosmtpd"]
async fn a_failed_run_mails_its_result_when_on_failure_mail_is_set() {
    let smtp = Smtp::start();
    // Not yet 07:00 by the tests' clock: no digest, only the failure.
    let s = scenario()
        .script(refusing())
        .task("broken", "Answer.")
        .config(&smtp.mail_section(""))
        .config(&digest_at("07:00", "on_failure_mail = true"))
        .build()
        .await;

    let outcome = s.run().await;

    assert_eq!(outcome.exit_code(), 1);
    let mails = smtp.mails();
    assert_eq!(mails.len(), 1, "{mails:#?}");
    assert_eq!(mails[0].rcpt_tos, [TO]);
    assert_eq!(mails[0].subject, "agent-harness: a run failed (exit 1)");
    let body = &mails[0].body;
    let head = "agent-harness run exited 1: 0 succeeded, 1 failed, 0 left in the inbox";
    assert!(body.starts_with(head), "{body}");
    let task = format!(
        "- broken (run {RUN_ID}): failed (endpoint_error): the endpoint's answer ended the task (HTTP 400;"
    );
    assert_contains(body, &task);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs scripts/test: aiosmtpd"]
async fn starttls_is_required_unless_turned_off() {
    let smtp = Smtp::start();
    let s = scenario()
        .replies(vec![final_answer("done")])
        .task("t", "Answer.")
        .config(&format!(
            "[mail]\nsmtp_url = \"smtp://127.0.0.1:{}\"\nfrom = \"agent@example.com\"\n",
            smtp.port
        ))
        .config(&digest_at("00:00", ""))
        .build()
        .await;

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(smtp.mails().is_empty(), "sent in clear: {:?}", smtp.mails());
    let err = stderr(&out);
    assert_contains(&err, "a mail failed ([mail])");
    assert_contains(&err, &format!("server=smtp://127.0.0.1:{}", smtp.port));
    assert_contains(&err, "the server does not offer STARTTLS");
    assert_eq!(notify_failures(&s), "agent_harness_notify_failures_total 1");

    // Turned off, the same server takes it; the digest refused before
    // goes out with the next run.
    s.rewrite_config(&(smtp.mail_section("") + &digest_at("00:00", "")));
    let out = run_bin(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(smtp.mails().len(), 1);
    assert_eq!(notify_failures(&s), "agent_harness_notify_failures_total 1");
}

/// The day's digest mailed to a server showing a certificate only a
/// private CA signed, speaking TLS from the first byte (`smtps://`) when
/// `implicit`, else upgrading with STARTTLS: refused, saying what to set,
/// until `[tls] ca_file` names the CA; then delivered.
async fn mailed_through_a_server_a_private_ca_signed(implicit: bool) {
    let ca = PrivateCa::new();
    let smtp = Smtp::with_tls(&ca, implicit);
    let scheme = if implicit { "smtps" } else { "smtp" };
    let mail = format!(
        "[mail]\nsmtp_url = \"{scheme}://127.0.0.1:{}\"\nfrom = \"agent@example.com\"\n",
        smtp.port
    );
    let s = scenario()
        .replies(vec![final_answer("done")])
        .task("t", "Answer.")
        .config(&mail)
        .config(&digest_at("00:00", ""))
        .build()
        .await;

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(smtp.mails().is_empty(), "{:?}", smtp.mails());
    let err = stderr(&out);
    assert!(
        err.contains("a mail failed ([mail])")
            && err.contains("UnknownIssuer")
            && err.contains("a private CA? set [tls] ca_file to its PEM certificate"),
        "{err}"
    );
    assert_eq!(notify_failures(&s), "agent_harness_notify_failures_total 1");

    // Trusted, the same server takes the digest refused before.
    s.rewrite_config(&format!(
        "{mail}{}{}",
        digest_at("00:00", ""),
        ca.tls_section()
    ));
    let out = run_bin(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mails = smtp.mails();
    assert_eq!(mails.len(), 1, "{}", stderr(&out));
    assert_eq!(mails[0].rcpt_tos, [TO]);
    assert_eq!(notify_failures(&s), "agent_harness_notify_failures_total 1");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs scripts/test: aiosmtpd"]
async fn starttls_to_a_server_a_private_ca_signed_goes_through_once_ca_file_names_it() {
    mailed_through_a_server_a_private_ca_signed(false).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs scripts/test: aiosmtpd"]
async fn smtps_to_a_server_a_private_ca_signed_goes_through_once_ca_file_names_it() {
    mailed_through_a_server_a_private_ca_signed(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn no_mail_server_is_a_warning_and_a_count_never_the_exit_code() {
    let port = closed_port();
    let s = scenario()
        .script(refusing())
        .task("broken", "Answer.")
        .config(&format!(
            "[mail]\nsmtp_url = \"smtp://127.0.0.1:{port}\"\nstarttls = false\nfrom = \"agent@example.com\"\n"
        ))
        .config(&digest_at("00:00", "on_failure_mail = true"))
        .build()
        .await;

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let warnings = err.matches("a mail failed ([mail])").count();
    assert_eq!(warnings, 2, "the digest and the failure: {err}");
    assert!(err.contains("Connection refused"), "{err}");
    // The failure mail and the digest: one count each, however often tried.
    assert_eq!(notify_failures(&s), "agent_harness_notify_failures_total 2");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs scripts/test: aiosmtpd"]
async fn a_server_that_refuses_the_recipient_is_a_warning_and_a_count() {
    let smtp = Smtp::with(&["--refuse"]);
    let s = scenario()
        .replies(vec![final_answer("done")])
        .task("t", "Answer.")
        .config(&smtp.mail_section(""))
        .config(&digest_at("00:00", ""))
        .build()
        .await;

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("a mail failed ([mail])") && err.contains("no such mailbox here"),
        "{err}"
    );
    assert_eq!(notify_failures(&s), "agent_harness_notify_failures_total 1");
    assert!(smtp.mails().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_left_for_a_later_one_mails_no_failure() {
    // Any mail tried would fail here, and count.
    let port = closed_port();
    let s = scenario()
        .endpoint_at(&format!("http://127.0.0.1:{}/v1", closed_port()))
        .task("waiting", "Answer.")
        .config(&format!(
            "[mail]\nsmtp_url = \"smtp://127.0.0.1:{port}\"\nstarttls = false\nfrom = \"agent@example.com\"\n"
        ))
        // Not yet 07:00 by the tests' clock: no digest either.
        .config(&digest_at("07:00", "on_failure_mail = true"))
        .build()
        .await;

    let outcome = s.run().await;

    assert_eq!(outcome.exit_code(), 75);
    assert_eq!(notify_failures(&s), "agent_harness_notify_failures_total 0");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_never_greets_is_cut_by_the_ends_bound_and_counted_once() {
    let port = silent_server();
    let s = scenario()
        .replies(vec![final_answer("done")])
        .task("t", "Answer.")
        .config(&format!(
            "[mail]\nsmtp_url = \"smtp://127.0.0.1:{port}\"\nstarttls = false\nfrom = \"agent@example.com\"\n"
        ))
        // 06:00 has passed by the tests' clock: the digest is due.
        .config(&digest_at("06:00", ""))
        .build()
        .await;

    // The end's bound (10 s) ends it; the limit is only what a loaded
    // machine never reaches.
    let outcome = before_hang_limit("a run whose mail server never greets", s.run()).await;

    assert_eq!(outcome.exit_code(), 0);
    assert_eq!(notify_failures(&s), "agent_harness_notify_failures_total 1");
}

#[tokio::test(flavor = "multi_thread")]
async fn check_warns_of_a_mail_section_nothing_is_sent_through() {
    let s = scenario()
        .config("[mail]\nsmtp_url = \"smtp://127.0.0.1:25\"\nstarttls = false\nfrom = \"agent@example.com\"\n")
        .build()
        .await;

    let out = run_bin(&s, &["check"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "warning: [mail] is set, but [notify] digest_to names nobody, so no mail is ever sent"
        ) && text.contains("config ok with 1 warning(s)"),
        "{text}"
    );
}

/// `[mail]`'s login read from `SMTP_USERNAME` and `SMTP_PASSWORD`.
const LOGIN_FROM_ENV: &str = "username_env = \"SMTP_USERNAME\"\npassword_env = \"SMTP_PASSWORD\"";

/// A server whose refusal quotes the AUTH exchange: the base64 of the
/// user and password never reaches the journal, the deliveries file or
/// `status`; the refusal is said by its code.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs scripts/test: aiosmtpd"]
async fn a_refused_login_is_said_by_its_code_never_by_the_servers_quote() {
    let smtp = Smtp::with(&["--login", "digest-bot:right-pass", "--echo-auth"]);
    let s = scenario()
        .replies(vec![final_answer("done")])
        .task("t", "Answer.")
        .config(&smtp.mail_section(LOGIN_FROM_ENV))
        .config(&digest_at("00:00", ""))
        .build()
        .await;
    let wrong = "wrong-pass-SECRET77";
    // What the server would quote: base64 of NUL user NUL password.
    let quoted = "AGRpZ2VzdC1ib3QAd3JvbmctcGFzcy1TRUNSRVQ3Nw==";

    let out = bin(&s)
        .env("SMTP_USERNAME", "digest-bot")
        .env("SMTP_PASSWORD", wrong)
        .arg("run")
        .output()
        .unwrap();

    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("the server refused the login (535"), "{err}");
    let status = stdout(&bin(&s).arg("status").output().unwrap());
    let kept = std::fs::read_dir(s.root().join("tasks"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    for text in [&err, &status, &kept] {
        assert_lacks(text, quoted);
        assert_lacks(text, "SECRET77");
    }
    assert!(smtp.mails().is_empty());
}

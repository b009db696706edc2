//! The morning after (docs/operating.md, "Digest and mail"): `digest` says
//! what happened since the last mailed digest — failures first, each with the
//! command that runs it again, then the answers — and moves no mark; the
//! first `run` at or after `[notify] digest_at` mails it once a day, that
//! run included, redacted, with how that run ended and the folders it could
//! not read; records that are garbage never stop it.

use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::common::smtp::{FROM, Mail, Smtp, TO, digest_at};
use crate::common::*;

/// A model that refuses the first request (HTTP 400) and answers the rest.
fn refuses_then_answers(answer: &str) -> Vec<ResponseTemplate> {
    vec![
        ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad request"}})),
        ok(final_answer(answer)),
    ]
}

/// `[mail]` at `smtp`, the digest mailed from `at` (HH:MM) on.
fn mail_config(smtp: &Smtp, at: &str) -> String {
    format!("{}{}", smtp.mail_section(""), digest_at(at, ""))
}

/// A scenario whose runs mail the digest through `smtp` from `at` (HH:MM) on.
fn mailing(smtp: &Smtp, at: &str) -> Scenario {
    scenario().config(&mail_config(smtp, at))
}

/// The one mail `smtp` took.
#[track_caller]
fn the_one_mail(smtp: &Smtp) -> Mail {
    let mut mails = smtp.mails();
    assert_eq!(mails.len(), 1, "{mails:#?}");
    mails.remove(0)
}

/// The command that runs task `broken` of the scene again.
fn run_again(s: &Scene) -> String {
    let config = s.config_path();
    format!("agent-harness --config {} requeue broken", config.display())
}

#[tokio::test]
#[ignore = "needs scripts/test: aiosmtpd"]
async fn the_digest_is_mailed_once_a_day_by_the_first_run_at_or_after_digest_at() {
    let smtp = Smtp::start();
    // The tests' clock says 06:15 UTC.
    let s = mailing(&smtp, "07:00")
        .answers(&["Early answer."])
        .task("early", "Answer.")
        .ran()
        .await;
    assert!(smtp.mails().is_empty(), "mailed before 07:00");

    s.rewrite_config(&mail_config(&smtp, "06:00"));
    s.task("late", "Answer.");
    s.run().await;
    s.task("later", "Answer.");
    s.run().await;

    let mail = the_one_mail(&smtp);
    // The run that sent it is in it, and the one before.
    assert_contains(
        &mail.body,
        "Answers (2):\n- early: Early answer.\n- late: Early answer.\n",
    );
    assert_eq!(mail.subject, "agent-harness digest: 2 answered");
}

#[tokio::test]
#[ignore = "needs scripts/test: aiosmtpd"]
async fn the_mailed_digest_is_plain_utf8_text_with_its_own_id_and_how_its_run_ended() {
    let smtp = Smtp::start();
    mailing(&smtp, "06:00")
        .answers(&["Fine."])
        .task("t", "Answer.")
        .ran()
        .await;

    let mail = the_one_mail(&smtp);
    assert_eq!(mail.rcpt_tos, [TO]);
    assert_eq!(mail.from, FROM);
    assert_eq!(mail.content_type, "text/plain");
    assert_eq!(mail.charset.as_deref(), Some("utf-8"));
    // Its own id, made of a random part and this host's name.
    let id = mail.message_id.as_deref().unwrap_or_default();
    assert!(
        id.starts_with('<') && id.ends_with('>') && id.contains('@'),
        "{mail:#?}"
    );
    assert_contains(
        &mail.body,
        "\nThis run, which sends the digest, exited 0:\n  1 succeeded in ",
    );
}

/// A run that touched no task (the endpoint unreachable: 75), mailing the
/// digest, with a task folder planted as a link: never followed, so not read.
async fn a_night_that_touched_no_task(smtp: &Smtp) -> Scene {
    let s = mailing(smtp, "06:00")
        .endpoint_at(&format!("http://127.0.0.1:{}/v1", closed_port()))
        .task("waiting", "Answer.")
        .build()
        .await;
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(s.root().join("logs")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), s.root().join("logs/linked")).unwrap();
    assert_eq!(s.run().await.exit_code(), 75);
    s
}

#[tokio::test]
#[ignore = "needs scripts/test: aiosmtpd"]
async fn a_night_that_touched_no_task_is_never_nothing_happened() {
    let smtp = Smtp::start();
    let _s = a_night_that_touched_no_task(&smtp).await;

    let mail = the_one_mail(&smtp);
    assert_eq!(
        mail.subject,
        "agent-harness digest: this run exited 75, 1 folder(s) not read"
    );
    assert_lacks(&mail.body, "nothing happened");
    assert_contains(
        &mail.body,
        "\nThis run, which sends the digest, exited 75:\n  the endpoint is unreachable, no task was touched (1 left in the inbox): ",
    );
}

#[tokio::test]
#[ignore = "needs scripts/test: aiosmtpd"]
async fn the_mailed_digest_names_the_folders_it_could_not_read() {
    let smtp = Smtp::start();
    let _s = a_night_that_touched_no_task(&smtp).await;

    let body = the_one_mail(&smtp).body;
    assert_contains(&body, "\nNot read (1), so their runs are missing here:\n- ");
    assert_contains(&body, "logs/linked: a symbolic link, not followed\n");
}

#[tokio::test]
#[ignore = "needs scripts/test: aiosmtpd"]
async fn the_mailed_digest_puts_failures_first_with_the_command_that_runs_each_again() {
    let smtp = Smtp::start();
    let s = mailing(&smtp, "06:00")
        .script(refuses_then_answers("Grüße: all good.\nSecond line."))
        .task("broken", "Answer.")
        .task("good", "Answer.")
        .build()
        .await;

    let outcome = s.run().await;

    assert_eq!(outcome.exit_code(), 1);
    let body = the_one_mail(&smtp).body;
    let failed = body.find("Failed (1):").expect(&body);
    let answers = body.find("Answers (1):").expect(&body);
    assert!(failed < answers, "{body}");
    assert_contains(&body, "- broken: failed (endpoint_error), run ");
    assert_contains(&body, &format!("  run it again: {}\n", run_again(&s)));
    // UTF-8 whole, the answer's first line only.
    assert_contains(&body, "- good: Grüße: all good.\n");
    assert_lacks(&body, "Second line.");
    assert_contains(&body, "\nSpent in this period: ");
}

/// The tests' environment with an SMTP login.
fn with_login(key: &str) -> Option<String> {
    match key {
        "SMTP_USERNAME" => Some("digest-bot".into()),
        "SMTP_PASSWORD" => Some("smtp-pass-SECRET42".into()),
        _ => test_env(key),
    }
}

/// A run of `task` written by hand into the logs, answering `answer`: a
/// record left by another version, or by another hand.
fn planted_run(s: &Scene, task: &str, answer: &str) {
    let at = chrono::DateTime::parse_from_rfc3339("2026-04-09T05:00:00Z")
        .unwrap()
        .to_utc();
    let mut summary = agent_harness::records::Summary::blank(task, "20260409T050000Z", at);
    summary.final_answer = Some(answer.into());
    let dir = s.root().join("logs").join(task).join("20260409T050000Z");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string(&summary).unwrap(),
    )
    .unwrap();
}

#[tokio::test]
#[ignore = "needs scripts/test: aiosmtpd"]
async fn the_mail_logs_in_from_the_environment_and_never_carries_a_secret() {
    let smtp = Smtp::with(&["--login", "digest-bot:smtp-pass-SECRET42"]);
    let s = scenario()
        .env(with_login)
        .replies(vec![final_answer("Fine.")])
        .task("t", "Answer.")
        .config(
            &smtp
                .mail_section("username_env = \"SMTP_USERNAME\"\npassword_env = \"SMTP_PASSWORD\""),
        )
        .config(&digest_at("06:00", ""))
        .build()
        .await;
    planted_run(&s, "leaky", "The password is smtp-pass-SECRET42, keep it.");

    s.run().await;

    let mails = smtp.mails();
    assert_eq!(mails.len(), 1, "{mails:#?}");
    assert_eq!(mails[0].login.as_deref(), Some("digest-bot"));
    let body = &mails[0].body;
    assert_contains(body, "- leaky: The password is ***, keep it.");
    assert!(!body.contains("SECRET42"), "{body}");
}

/// Tasks `broken` (refused) and `good` run by the binary (exit 1).
async fn broken_and_good_ran() -> Scene {
    let s = scenario()
        .script(refuses_then_answers("All good."))
        .task("broken", "Answer.")
        .task("good", "Answer.")
        .build()
        .await;
    let out = run_bin(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn digest_prints_failures_first_and_moves_no_mark() {
    let s = broken_and_good_ran().await;

    let out = run_bin(&s, &["digest"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("agent-harness digest: "), "{text}");
    let failed = text
        .find("Failed (1):\n- broken: failed (endpoint_error)")
        .expect(&text);
    let answers = text.find("Answers (1):\n- good: All good.\n").expect(&text);
    assert!(failed < answers, "{text}");
    assert_contains(&text, &format!("  run it again: {}\n", run_again(&s)));
    // Printed, not mailed: the next digest still covers the same runs
    // (its header says the time, to the minute: not compared).
    let after_header = |text: &str| text.split_once('\n').map(|(_, rest)| rest.to_string());
    assert_eq!(
        after_header(&stdout(&run_bin(&s, &["digest"]).await)),
        after_header(&text)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn digest_json_says_each_failure_with_the_command_that_runs_it_again() {
    let s = broken_and_good_ran().await;

    let out = run_bin(&s, &["digest", "--json"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let digest: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(digest["failures"][0]["task"], "broken");
    assert_eq!(digest["failures"][0]["stop_reason"], "endpoint_error");
    assert_eq!(digest["failures"][0]["run_again"], run_again(&s));
    assert_eq!(digest["answers"][0]["first_line"], "All good.");
    // The period's runs, whatever day it is now.
    assert_eq!(digest["spend"]["tokens"], 160);
}

#[tokio::test(flavor = "multi_thread")]
async fn digest_since_takes_an_age_and_refuses_what_is_no_time() {
    let s = scenario()
        .replies(vec![final_answer("done")])
        .task("t", "Answer.")
        .build()
        .await;
    run_bin(&s, &["run"]).await;

    let out = run_bin(&s, &["digest", "--since", "0h"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("agent-harness digest: nothing happened since "),
        "{}",
        stdout(&out)
    );
    assert_eq!(stdout(&out).lines().count(), 1);
    let out = run_bin(&s, &["digest", "--since", "3d"]).await;
    assert!(stdout(&out).contains("- t: done\n"), "{}", stdout(&out));

    let out = run_bin(&s, &["digest", "--since", "yesterday"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_contains(stderr(&out), "--since: \"yesterday\" is no time");
}

#[tokio::test(flavor = "multi_thread")]
async fn garbage_huge_or_hostile_summaries_never_stop_the_digest() {
    let s = scenario()
        .replies(vec![final_answer("done")])
        .task("t", "Answer.")
        .build()
        .await;
    run_bin(&s, &["run"]).await;
    let logs = s.root().join("logs");
    let run_id = chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string();
    let garbage = logs.join("garbage").join(&run_id);
    std::fs::create_dir_all(&garbage).unwrap();
    std::fs::write(garbage.join("summary.json"), "{\"task\": [[[[").unwrap();
    // Far over the summary's cap, and sparse: never read.
    let huge = logs.join("huge").join(&run_id);
    std::fs::create_dir_all(&huge).unwrap();
    std::fs::File::create(huge.join("summary.json"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    // A summary whose answer would draw on the terminal.
    let mut summary = s.summary_in(&the_run_dir(&s, "t"));
    summary.task = "hostile".into();
    summary.final_answer = Some(format!("\u{1b}]52;c;AAAA\u{7}{}", "x".repeat(100_000)));
    let hostile = logs.join("hostile").join(&run_id);
    std::fs::create_dir_all(&hostile).unwrap();
    std::fs::write(
        hostile.join("summary.json"),
        serde_json::to_string(&summary).unwrap(),
    )
    .unwrap();

    let out = run_bin(&s, &["digest"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("- t: done\n"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("- hostile: "))
        .expect(&text);
    assert!(
        !line.contains('\u{1b}') && line.contains("\\u{1b}]52"),
        "{line}"
    );
    assert!(line.chars().count() < 300, "{}", line.len());
}

/// A run of `task` started at `at` (RFC 3339), written into the logs as a
/// run of this version writes it.
fn plant(s: &Scene, task: &str, at: &str, failed: bool, answer: &str, recurring: bool) {
    use agent_harness::agent::StopReason;
    use agent_harness::records::{Status, Summary};
    let at = chrono::DateTime::parse_from_rfc3339(at).unwrap().to_utc();
    let run_id = at.format("%Y%m%dT%H%M%SZ").to_string();
    let mut summary = Summary::blank(task, &run_id, at);
    summary.recurring = recurring;
    if failed {
        summary.status = Status::Failed;
        summary.stop_reason = StopReason::MaxTurns;
        summary.error = Some("the task reached max_turns = 8".into());
    } else {
        summary.final_answer = Some(answer.into());
    }
    let dir = s.root().join("logs").join(task).join(&run_id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string(&summary).unwrap(),
    )
    .unwrap();
}

#[tokio::test]
async fn after_a_night_of_20_runs_the_digest_lists_its_2_failures_first_and_folds_the_rest() {
    let s = offline().build().await;
    // An hourly recurring task that said the same each time, 18 times,
    // and two one-off tasks that failed in the night.
    for hour in 0..18 {
        let at = format!("2026-04-09T{:02}:{:02}:00Z", hour / 3, (hour % 3) * 20);
        plant(&s, "hourly", &at, false, "All quiet.", true);
    }
    plant(&s, "import", "2026-04-09T02:10:00Z", true, "", false);
    plant(&s, "export", "2026-04-09T04:10:00Z", true, "", false);

    let out = run_bin(&s, &["digest", "--since", "2026-04-08T22:00:00Z", "--json"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let digest: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let failed: Vec<&str> = digest["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["task"].as_str().unwrap())
        .collect();
    assert_eq!(failed.len(), 2, "{digest:#}");
    assert!(
        failed.contains(&"import") && failed.contains(&"export"),
        "{failed:?}"
    );
    // The first run of the night is said; the 17 that ended as their
    // previous run did are one count.
    assert_eq!(digest["answers"].as_array().unwrap().len(), 1, "{digest:#}");
    assert_eq!(digest["unchanged"], 17, "{digest:#}");

    let text = stdout(&run_bin(&s, &["digest", "--since", "2026-04-08T22:00:00Z"]).await);
    let failures = text.find("Failed (2):").expect(&text);
    let answers = text
        .find("Answers (1):\n- hourly: All quiet.")
        .expect(&text);
    assert!(failures < answers, "failures first:\n{text}");
    assert_eq!(text.matches("- hourly").count(), 1, "{text}");
}

#[tokio::test]
#[ignore = "needs scripts/test: aiosmtpd"]
async fn a_run_killed_while_its_digest_is_in_the_mail_server_leaves_the_period_to_a_later_run() {
    let said = tempfile::tempdir().unwrap();
    let data_received = said.path().join("said");
    let stalling = Smtp::with(&["--stall-data", &data_received.display().to_string()]);
    let s = scenario()
        .replies(vec![final_answer("Answered before the kill.")])
        .task("night", "Answer.")
        .config(&stalling.mail_section(""))
        .config(&digest_at("00:00", ""))
        .build()
        .await;

    // Killed once the server has the message's data, before it answers.
    let mut run = spawn_run(&s, stderr_to_log(&s));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(&data_received)
        .unwrap_or_default()
        .contains("DATA received")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the digest never reached DATA"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    run.kill().unwrap();
    run.wait().unwrap();
    let mark_path = s.root().join("tasks/.agent-harness-digest.json");
    let mark: Value = serde_json::from_str(&std::fs::read_to_string(&mark_path).unwrap()).unwrap();
    assert!(mark["pending_since"].is_string(), "{mark}");
    assert!(mark.get("sent_at").is_none(), "never marked sent: {mark}");

    // Within the pending time, a run leaves it to the run that may still
    // be sending it.
    let smtp = Smtp::start();
    s.rewrite_config(&format!(
        "{}{}",
        smtp.mail_section(""),
        digest_at("00:00", "")
    ));
    let out = run_bin(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(smtp.mails().is_empty(), "{:#?}", smtp.mails());

    // Later, the killed run surely gone: the period goes out, the run
    // before the kill in it, and the mark is kept as sent.
    let taken = chrono::DateTime::parse_from_rfc3339(mark["pending_since"].as_str().unwrap())
        .unwrap()
        .to_utc();
    let earlier = taken - chrono::TimeDelta::minutes(6);
    std::fs::write(
        &mark_path,
        json!({"pending_since": earlier.to_rfc3339()}).to_string(),
    )
    .unwrap();
    let out = run_bin(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mails = smtp.mails();
    assert_eq!(mails.len(), 1, "{mails:#?}");
    assert_contains(&mails[0].body, "- night: Answered before the kill.");
    let mark: Value = serde_json::from_str(&std::fs::read_to_string(&mark_path).unwrap()).unwrap();
    assert!(
        mark["sent_at"].is_string() && mark.get("pending_since").is_none(),
        "{mark}"
    );
}

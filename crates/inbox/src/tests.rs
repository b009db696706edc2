//! Unit tests of `inbox`.

use super::*;
use harness_base::text::short_hash;

#[test]
fn a_plain_body_is_the_whole_task() {
    let t = parse_task("# Title\nDo the thing.\n").unwrap();
    assert_eq!(t.frontmatter, Frontmatter::default());
    assert_eq!(t.body, "# Title\nDo the thing.\n");
}

#[test]
fn frontmatter_sets_overrides_and_is_cut_from_the_body() {
    let t = parse_task(
        "+++\nmax_turns = 5\ntools = [\"webfetch\"]\nsystem_prompt = \"Be brief.\"\nenable_thinking = false\n+++\n# Scan\nGo.\n",
    )
    .unwrap();
    assert_eq!(t.frontmatter.max_turns, Some(5));
    assert_eq!(t.frontmatter.tools, Some(vec!["webfetch".to_string()]));
    assert_eq!(t.frontmatter.system_prompt.as_deref(), Some("Be brief."));
    assert_eq!(t.frontmatter.enable_thinking, Some(false));
    assert_eq!(t.body, "# Scan\nGo.\n");
}

#[test]
fn yaml_frontmatter_is_refused_and_a_rule_is_not_frontmatter() {
    for text in [
        "---\nmax_turns: 5\ntools: [webfetch]\n---\nDo it.\n",
        "---\r\ntitle: Weekly scan\r\n---\r\nDo it.\r\n",
        "---\nagent: scout\ntags:\n  - a\n---\nDo it.\n",
    ] {
        let e = parse_task(text).unwrap_err();
        assert_eq!(e.line, Some(1), "{text:?}");
        assert!(
            e.message
                .starts_with("frontmatter must be TOML between two +++ lines"),
            "{e:?}"
        );
    }
    // A horizontal rule, or dashes around prose, is the body.
    for text in [
        "---\nJust a rule above.\n",
        "---\nSome prose here.\n---\nMore.\n",
        "---\nsee: http://x\n",
        "Intro\n---\nkey: value\n---\n",
        "---\nhttp://example.com/report\n---\nRead the page above.\n",
        "---\n10:30\n---\nAt half past ten.\n",
    ] {
        let t = parse_task(text).unwrap();
        assert_eq!(t.body, text);
    }
}

#[test]
fn windows_line_endings_and_a_bom_are_accepted() {
    let t = parse_task("\u{feff}+++\r\nmax_turns = 2\r\n+++\r\nHello\r\n").unwrap();
    assert_eq!(t.frontmatter.max_turns, Some(2));
    assert_eq!(t.body, "Hello\r\n");
}

#[test]
fn an_unknown_frontmatter_key_names_its_line() {
    let e = parse_task("+++\nmax_turns = 5\nmax_turnz = 3\n+++\nbody\n").unwrap_err();
    assert_eq!(e.line, Some(3));
    assert!(e.message.contains("max_turnz"), "{e}");
}

#[test]
fn a_wrong_type_names_its_key_and_line() {
    let e = parse_task("+++\nmax_turns = \"five\"\n+++\nbody\n").unwrap_err();
    assert_eq!(e.line, Some(2));
    assert_eq!(
        e.message,
        "frontmatter: max_turns: expected an integer, found the string \"five\""
    );
}

#[test]
fn numbers_past_their_ceilings_name_key_and_line() {
    for (fm, line, start) in [
        (
            "max_wall_secs = 9223372036854775807",
            2,
            "max_wall_secs = 9223372036854775807 is above its ceiling, 86400",
        ),
        (
            "tools = []\nmax_turns = 0",
            3,
            "max_turns = 0 is below its minimum, 1",
        ),
        ("max_tokens = 1000001", 2, "max_tokens = 1000001 is above"),
        (
            "max_total_tokens = 1000000001",
            2,
            "max_total_tokens = 1000000001 is above",
        ),
        (
            "max_calls_per_turn = 65",
            2,
            "max_calls_per_turn = 65 is above",
        ),
        ("max_writes = 1001", 2, "max_writes = 1001 is above"),
        (
            "temperature = nan",
            2,
            "temperature = NaN is not a finite number",
        ),
        ("top_p = -inf", 2, "top_p = -inf is not a finite number"),
    ] {
        let e = parse_task(&format!("+++\n{fm}\n+++\nbody\n")).unwrap_err();
        assert_eq!(e.line, Some(line), "{fm}");
        assert!(
            e.message.starts_with(&format!("frontmatter: {start}")),
            "{fm}: {e}"
        );
    }
}

#[test]
fn links_fifos_and_sockets_are_invalid_and_their_targets_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "private").unwrap();
    let link = dir.path().join("link.md");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let fifo = dir.path().join("fifo.md");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path and a mode.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = read_task(&link).unwrap_err();
    assert_eq!(
        e.message,
        "not a regular file (a symbolic link); it was not read"
    );
    // A FIFO would block a plain open() until a writer came.
    let e = read_task(&fifo).unwrap_err();
    assert_eq!(e.message, "not a regular file (a FIFO); it was not read");
    let names: Vec<_> = list(dir.path())
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["fifo", "link"]);
    let moved = move_task(
        &paths(dir.path()),
        &link,
        &dir.path().join("failed"),
        "R",
        "link",
    )
    .unwrap();
    assert!(
        std::fs::symlink_metadata(&moved)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "private");
}

#[test]
fn long_names_are_shortened_with_a_hash_only_past_255_bytes() {
    let run_id = "20260409T061500Z";
    let fits = "n".repeat(255 - run_id.len() - 4);
    assert_eq!(
        fit_file_name(&format!("{run_id}-"), &fits, ".md"),
        format!("{run_id}-{fits}.md")
    );
    let long = "é".repeat(120); // 240 bytes
    let a = fit_file_name(&format!("{run_id}-"), &long, ".md");
    let b = fit_file_name(&format!("{run_id}-"), &format!("{long}x"), ".md");
    assert!(a.len() <= 255 && b.len() <= 255, "{} {}", a.len(), b.len());
    assert_ne!(a, b, "two long names stay apart");
    assert!(
        a.ends_with(&format!("~{:08x}.md", short_hash(&long))),
        "{a}"
    );
    assert!(std::str::from_utf8(a.as_bytes()).is_ok());

    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    for _ in 0..2 {
        let src = dir.path().join("t.md");
        std::fs::write(&src, "x").unwrap();
        let to = move_task(&paths(dir.path()), &src, &done, run_id, &long).unwrap();
        assert!(to.file_name().unwrap().len() <= 255);
    }
    assert_eq!(std::fs::read_dir(&done).unwrap().count(), 2);
}

#[test]
fn unclosed_frontmatter_is_invalid() {
    let e = parse_task("+++\nmax_turns = 5\nbody without a fence\n").unwrap_err();
    assert!(e.message.contains("never closed"), "{e}");
}

#[test]
fn an_empty_body_is_invalid() {
    assert!(
        parse_task("  \n\t\n")
            .unwrap_err()
            .message
            .contains("empty")
    );
    assert!(
        parse_task("+++\nmax_turns = 1\n+++\n   \n")
            .unwrap_err()
            .message
            .contains("empty")
    );
}

#[test]
fn a_fence_later_in_the_file_is_just_text() {
    let t = parse_task("Intro\n+++\nnot = \"frontmatter\"\n+++\n").unwrap();
    assert_eq!(t.frontmatter, Frontmatter::default());
    assert!(t.body.starts_with("Intro"));
}

#[test]
fn names_with_separators_or_dots_are_refused() {
    for bad in ["", "../x", "a/b", "a\\b", "..", ".hidden", "x..y"] {
        assert!(check_task_name(bad).is_err(), "{bad:?} accepted");
    }
    assert!(check_task_name("weekly-scan_2").is_ok());
}

#[test]
fn report_and_eval_are_reserved_names_that_never_run() {
    for name in ["report", "eval"] {
        let e = check_task_name(name).unwrap_err();
        assert!(
            e.contains("is reserved") && e.contains(&format!("logs/{name}/")),
            "{e}"
        );
    }
    assert!(check_task_name("reports").is_ok());
    assert!(check_task_name("eval-weekly").is_ok());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("report.md"), "Summarise.").unwrap();
    std::fs::write(dir.path().join("ok.md"), "Answer.").unwrap();
    let names: Vec<String> = list(dir.path())
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["ok"]);
    let strays = listing(dir.path()).unwrap().strays;
    assert_eq!(strays, [dir.path().join("report.md")]);
    assert!(
        reserved_entry(&strays[0])
            .unwrap()
            .contains("the HTML report")
    );
    assert_eq!(reserved_entry(&dir.path().join("ok.md")), None);
}

#[test]
fn files_that_are_too_big_or_not_utf8_are_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.md");
    std::fs::write(&big, vec![b'a'; (MAX_TASK_BYTES + 1) as usize]).unwrap();
    assert!(read_task(&big).unwrap_err().message.contains("1 MiB"));
    let bin = dir.path().join("bin.md");
    std::fs::write(&bin, b"line one\nbad \xff byte\n").unwrap();
    let e = read_task(&bin).unwrap_err();
    assert!(e.message.contains("UTF-8"));
    assert_eq!(e.line, Some(2));
}

#[test]
fn listing_is_sorted_and_skips_other_files() {
    let dir = tempfile::tempdir().unwrap();
    for n in ["b.md", "a.md", "c.txt", ".hidden.md", "10.md"] {
        std::fs::write(dir.path().join(n), "x").unwrap();
    }
    std::fs::create_dir(dir.path().join("d.md")).unwrap();
    let names: Vec<_> = list(dir.path())
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["10", "a", "b"]);
    let strays: Vec<_> = listing(dir.path())
        .unwrap()
        .strays
        .into_iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    // A hidden entry (an editor's swap file, a file `submit` is placing)
    // is neither a task nor a stray.
    assert_eq!(strays, ["c.txt", "d.md"]);
    assert!(
        list(&dir.path().join("missing")).is_err(),
        "a missing inbox is no empty one"
    );
}

/// The folders of a project in `root`.
fn paths(root: &Path) -> harness_config::Paths {
    harness_config::Paths {
        inbox: root.join("inbox"),
        done: root.join("done"),
        failed: root.join("failed"),
        logs: root.join("logs"),
        recurring: root.join("recurring"),
    }
}

#[test]
fn moves_never_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    for body in ["first", "second"] {
        let src = dir.path().join("t.md");
        std::fs::write(&src, body).unwrap();
        move_task(&paths(dir.path()), &src, &done, "20260101T000000Z", "t").unwrap();
        assert!(!src.exists());
    }
    assert_eq!(
        std::fs::read_to_string(done.join("20260101T000000Z-t.md")).unwrap(),
        "first"
    );
    assert_eq!(
        std::fs::read_to_string(done.join("20260101T000000Z-t-2.md")).unwrap(),
        "second"
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn frontmatter_line() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            Just("max_turns"),
            Just("max_wall_secs"),
            Just("max_total_tokens"),
            Just("max_tokens"),
            Just("temperature"),
            Just("top_p"),
            Just("tools"),
            Just("system_prompt"),
            Just("max_writes"),
            Just("max_calls_per_turn"),
            Just("enable_thinking"),
            Just("bogus"),
        ];
        let value = prop_oneof![
            any::<i64>().prop_map(|v| v.to_string()),
            any::<u64>().prop_map(|v| v.to_string()),
            Just("nan".to_string()),
            Just("-inf".to_string()),
            any::<f64>().prop_map(|v| format!("{v:?}")),
            Just("\"text\"".to_string()),
            Just("[\"webfetch\"]".to_string()),
            Just("true".to_string()),
            Just("{".to_string()),
            "\\PC{0,12}",
        ];
        (key, value).prop_map(|(k, v)| format!("{k} = {v}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn any_frontmatter_parses_or_names_a_line_inside_it(
            lines in proptest::collection::vec(frontmatter_line(), 0..6),
            body in "\\PC{0,40}",
        ) {
            let text = format!("+++\n{}\n+++\n{body}", lines.join("\n"));
            match parse_task(&text) {
                Ok(t) => {
                    prop_assert_eq!(t.body, body);
                    let fm = t.frontmatter;
                    prop_assert!(fm.max_turns.is_none_or(|v| (1..=1000).contains(&v)));
                    prop_assert!(fm.max_wall_secs.is_none_or(|v| (1..=86_400).contains(&v)));
                    prop_assert!(fm.temperature.is_none_or(f64::is_finite));
                    prop_assert!(fm.top_p.is_none_or(f64::is_finite));
                }
                Err(e) => {
                    let lines_in_file = text.lines().count().max(1);
                    prop_assert!(e.line.is_none_or(|l| l >= 1 && l <= lines_in_file), "{e:?}");
                    prop_assert!(!e.message.is_empty());
                }
            }
        }

        #[test]
        fn any_text_at_all_is_a_task_or_a_reason(text in "\\PC{0,300}") {
            match parse_task(&text) {
                Ok(t) => prop_assert!(!t.body.trim().is_empty()),
                Err(e) => prop_assert!(!e.message.is_empty()),
            }
        }
    }
}

#[test]
fn a_filed_name_reads_back_as_its_run_id_and_task() {
    assert_eq!(
        filed_readings("20260409T061500Z-scan.md"),
        [("20260409T061500Z".to_string(), "scan".to_string())]
    );
    assert_eq!(
        filed_readings("20260409T061500Z-2-scan.md"),
        [
            ("20260409T061500Z-2".to_string(), "scan".to_string()),
            ("20260409T061500Z".to_string(), "2-scan".to_string())
        ]
    );
    for not_filed in [
        "scan.md",
        "20260409T061500Z.md",
        "20260409T061500Z-.md",
        "2026040XT061500Z-a.md",
        "20260409T061500Z-a.txt",
        "é",
    ] {
        assert!(filed_readings(not_filed).is_empty(), "{not_filed}");
    }
}

proptest::proptest! {
    #[test]
    fn every_name_move_task_writes_reads_back(
        name in "[a-z0-9][a-z0-9_.-]{0,40}",
        stamp in "[0-9]{8}T[0-9]{6}Z",
        clash in proptest::option::of(2u32..50),
    ) {
        let run_id = match clash {
            Some(n) => format!("{stamp}-{n}"),
            None => stamp,
        };
        let file = fit_file_name(&format!("{run_id}-"), &name, ".md");
        proptest::prop_assert!(filed_readings(&file).contains(&(run_id, name)));
    }
}

#[test]
fn keys_set_from_flags_win_over_the_frontmatter_and_keep_the_body() {
    let agent = |s: &str| toml::Value::String(s.into());
    let plain = with_keys("Do it.\n", &[("agent", agent("scout"))]).unwrap();
    assert_eq!(plain, "+++\nagent = \"scout\"\n+++\nDo it.\n");
    let text = "+++\nagent = \"old\"\nmax_turns = 2\n+++\nBody\n+++\nnot frontmatter\n";
    let set = with_keys(text, &[("agent", agent("new"))]).unwrap();
    let task = parse_task(&set).unwrap();
    assert_eq!(task.frontmatter.agent.as_deref(), Some("new"));
    assert_eq!(task.frontmatter.max_turns, Some(2));
    assert_eq!(task.body, "Body\n+++\nnot frontmatter\n");
    assert_eq!(
        with_keys(text, &[]).unwrap(),
        text,
        "no flag, the text as given"
    );
    assert!(with_keys("+++\nmax_turns = 2\nDo it.", &[("agent", agent("a"))]).is_err());
    assert!(with_keys("", &[]).is_err());
}

#[test]
fn a_schedule_is_five_cron_fields_or_one_of_four_nicknames_read_in_a_time_zone() {
    use chrono::TimeZone;
    for ok in [
        "* * * * *",
        "0 6 * * MON",
        "*/15 8-18 * * 1-5",
        "@hourly",
        "@DAILY",
        "@weekly",
        "@monthly",
    ] {
        assert!(Schedule::parse(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "* * * *",
        "0 0 6 * * MON",
        "@yearly",
        "@reboot",
        "61 * * * *",
        "x y z w v",
    ] {
        assert!(Schedule::parse(bad).is_err(), "{bad}");
    }
    let now = chrono::Utc.with_ymd_and_hms(2026, 3, 29, 12, 0, 0).unwrap();
    let berlin = harness_base::zone::Zone::named("Europe/Berlin").unwrap();
    let s = Schedule::parse("0 6 * * *").unwrap();
    // The day Berlin moves to summer time: 06:00 CEST is 04:00 UTC.
    assert_eq!(
        s.latest(now, &berlin).unwrap(),
        chrono::Utc.with_ymd_and_hms(2026, 3, 29, 4, 0, 0).unwrap()
    );
    assert_eq!(
        s.next_after(now, &berlin).unwrap(),
        chrono::Utc.with_ymd_and_hms(2026, 3, 30, 4, 0, 0).unwrap()
    );
    let weekly = Schedule::parse("@weekly").unwrap();
    let utc = harness_base::zone::Zone::utc();
    assert_eq!(
        weekly.latest(now, &utc).unwrap(),
        chrono::Utc.with_ymd_and_hms(2026, 3, 29, 0, 0, 0).unwrap(),
        "2026-03-29 is a Sunday"
    );
}

proptest::proptest! {
    #[test]
    fn the_latest_slot_is_never_after_now_and_the_next_never_before(
        minute in 0u32..60, hour in 0u32..24, secs in 0i64..400_000_000,
    ) {
        let now = chrono::DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap();
        let s = Schedule::parse(&format!("{minute} {hour} * * *")).unwrap();
        let tz = harness_base::zone::Zone::named("America/New_York").unwrap();
        let latest = s.latest(now, &tz).unwrap();
        let next = s.next_after(now, &tz).unwrap();
        proptest::prop_assert!(latest <= now && next > now);
        proptest::prop_assert!(next - latest <= chrono::Duration::hours(25));
    }
}

mod names_as_typed {
    use super::super::whereabouts::nearest;
    use super::*;

    fn paths(root: &Path) -> harness_config::Paths {
        let p = |d: &str| {
            let dir = root.join(d);
            std::fs::create_dir_all(&dir).unwrap();
            dir
        };
        harness_config::Paths {
            inbox: p("inbox"),
            done: p("done"),
            failed: p("failed"),
            logs: p("logs"),
            recurring: p("recurring"),
        }
    }

    #[test]
    fn one_trailing_md_is_stripped() {
        assert_eq!(task_name_of("example.md"), "example");
        assert_eq!(task_name_of("example"), "example");
        assert_eq!(task_name_of("x.md.md"), "x.md");
        assert_eq!(task_name_of("20260409T061500Z"), "20260409T061500Z");
    }

    #[test]
    fn a_task_is_found_in_each_folder_and_said_where() {
        let root = tempfile::tempdir().unwrap();
        let paths = paths(root.path());
        std::fs::write(paths.inbox.join("waiting.md"), "x").unwrap();
        std::fs::write(paths.done.join("20260409T061500Z-example.md"), "x").unwrap();
        std::fs::write(paths.failed.join("20260409T061500Z-2-broken.md"), "x").unwrap();
        std::fs::write(paths.recurring.join("daily.md"), "x").unwrap();
        std::fs::create_dir_all(paths.logs.join("example/20260409T061500Z")).unwrap();
        std::fs::create_dir_all(paths.logs.join("gone")).unwrap();

        let w = whereabouts(&paths, "example");
        assert_eq!(w.places, [Place::Done, Place::Logs]);
        let failed = format!("requeue takes tasks from {}/", paths.failed.display());
        assert_eq!(
            w.say(&paths, Place::Failed, &failed),
            format!(
                "example is in {}/ (it succeeded) and recorded in {}/; {failed}",
                paths.done.display(),
                paths.logs.display()
            )
        );
        assert_eq!(whereabouts(&paths, "waiting").places, [Place::Inbox]);
        assert_eq!(whereabouts(&paths, "broken").places, [Place::Failed]);
        assert_eq!(whereabouts(&paths, "daily").places, [Place::Recurring]);
        let gone = whereabouts(&paths, "gone");
        assert_eq!(gone.places, [Place::Logs]);
        assert!(
            gone.say(&paths, Place::Inbox, "x")
                .starts_with(&format!("gone is only in {}/", paths.logs.display())),
            "{}",
            gone.say(&paths, Place::Inbox, "x")
        );
        // Found only where the command looked, without what it wants
        // there: said as that, never as "no task".
        assert_eq!(
            gone.say(&paths, Place::Logs, "no run of it is recorded"),
            "gone: no run of it is recorded"
        );
    }

    #[test]
    fn a_name_found_nowhere_says_the_nearest_names() {
        let root = tempfile::tempdir().unwrap();
        let paths = paths(root.path());
        std::fs::write(paths.done.join("20260409T061500Z-example.md"), "x").unwrap();
        std::fs::write(paths.inbox.join("sample.md"), "x").unwrap();

        let w = whereabouts(&paths, "exmaple");
        assert!(w.places.is_empty());
        assert_eq!(w.near, ["example"]);
        assert!(
            w.say(&paths, Place::Failed, "x")
                .ends_with("did you mean exmaple → example?"),
            "{}",
            w.say(&paths, Place::Failed, "x")
        );
        let none = whereabouts(&paths, "zzzzzzzz");
        assert!(none.near.is_empty());
        assert!(
            none.say(&paths, Place::Inbox, "wanted")
                .ends_with("; wanted")
        );
    }

    #[test]
    fn nearest_is_a_small_distance_nearest_first_case_ignored() {
        let names: std::collections::BTreeSet<String> =
            ["example", "examples", "Example2", "other", "ab"]
                .map(String::from)
                .into();
        assert_eq!(
            nearest("exmaple", &names),
            ["example", "Example2", "examples"]
        );
        assert_eq!(
            nearest("EXAMPLE2", &names),
            ["Example2", "example", "examples"]
        );
        assert_eq!(nearest("xy", &names), Vec::<String>::new());
        assert_eq!(nearest("ac", &names), ["ab"]);
    }
}

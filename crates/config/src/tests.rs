//! Unit tests of `config`.

use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    let env = |k: &str| match k {
        "RUNPOD_API_KEY" => Some("rp_secret".to_string()),
        "NOTEWORX_TOKEN" => Some("nwx_secret".to_string()),
        _ => None,
    };
    Config::parse(
        text,
        Path::new("/etc/ah/agent.toml"),
        Path::new("/etc/ah"),
        &env,
    )
}

#[test]
fn set_values_are_secret_by_their_key_words_or_their_userinfo() {
    let secret = |k: &str, v: &str| {
        setting_secrets(&[(k.to_string(), v.to_string())])
            .into_iter()
            .map(|s| s.expose().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(secret("model.extra.api_key", "sk-live-A"), ["sk-live-A"]);
    assert_eq!(
        secret("model.extra.api_key", "'sk-live-B'"),
        ["sk-live-B"],
        "a TOML literal"
    );
    assert_eq!(
        secret("model.extra.api_key", r#""sk\u002Dlive-C""#),
        ["sk-live-C"],
        "an escape"
    );
    assert_eq!(
        secret("model.extra", r#"{api_key="SECRETD", n=1}"#),
        ["SECRETD"],
        "inside a table"
    );
    assert_eq!(
        secret("openai.base_url", "http://bob:pw-SECRETE@host/v1"),
        ["http://bob:pw-SECRETE@host/v1", "pw-SECRETE", "bob"]
    );
    for (k, v) in [
        ("model.max_tokens", "1024"),
        ("limits.max_total_tokens", "60000"),
        ("model.replay_thinking", "keep"),
        ("openai.base_url", "http://host/v1"),
    ] {
        assert!(secret(k, v).is_empty(), "{k}={v}");
        assert!(!is_secret_setting(k, v), "{k}={v}");
    }
    assert!(is_secret_setting("model.extra.auth_token", "x"));
}

#[test]
fn a_bound_or_a_missing_key_names_its_line() {
    let e = parse("[runpod]\nendpoint_id = \"a\"\n\n[limits]\nmax_turns = 0\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "/etc/ah/agent.toml: line 5: [limits] max_turns = 0 is below its minimum, 1"
    );
    let e = parse("[runpod]\nendpoint_id = \"a\"\npoll_interval_ms = 1\n").unwrap_err();
    assert!(
        e.message.starts_with("line 3: [runpod] poll_interval_ms"),
        "{e}"
    );
    let e = parse("[runpod]\nendpoint_id = \"a\"\n[agents.scout]\ntools = []\nmax_writes = 5000\n")
        .unwrap_err();
    assert!(
        e.message.starts_with("line 5: [agents.scout] max_writes"),
        "{e}"
    );
    // A key that is not in the file (a default, a missing one) has no line.
    let e = parse("[endpoint]\nkind = \"openai\"\n").unwrap_err();
    assert!(
        e.message.starts_with("[openai] base_url is required"),
        "{e}"
    );
}

#[test]
fn defaults_follow_the_spec() {
    let c = parse("[runpod]\nendpoint_id = \"abc\"\n").unwrap();
    assert_eq!(c.endpoint.kind, EndpointKind::Runpod);
    assert_eq!(c.endpoint.base_url, "https://api.runpod.ai/v2/abc");
    assert_eq!(c.endpoint.api_key, Some(Secret::new("rp_secret")));
    assert_eq!(c.limits, Limits::default());
    assert_eq!(c.paths.inbox, PathBuf::from("/etc/ah/tasks/inbox"));
    assert_eq!(c.paths.state_dir(), PathBuf::from("/etc/ah/tasks"));
    assert_eq!(c.model.max_tokens, 2048);
    assert_eq!(
        c.model.chat_template_kwargs.get("enable_thinking"),
        Some(&Value::Bool(true))
    );
    assert!(c.webfetch.is_some());
    assert!(c.noteworx.is_none(), "noteworx needs a base_url");
}

#[test]
fn unknown_key_is_named_with_its_line() {
    let e = parse("[runpod]\nendpoint_id = \"abc\"\n[limits]\nmax_turn = 3\n").unwrap_err();
    assert_eq!(e.path, "/etc/ah/agent.toml");
    assert!(e.message.contains("line 4"), "{e}");
    assert!(e.message.contains("max_turn"), "{e}");
}

#[test]
fn wrong_type_is_an_error_naming_the_section_the_key_and_the_line() {
    let e = parse("[runpod]\nendpoint_id = \"abc\"\n[limits]\nmax_turns = \"five\"\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "/etc/ah/agent.toml: line 4: [limits] max_turns: expected an integer, found the string \"five\""
    );
    let e = parse("[runpod]\nendpoint_id = \"abc\"\n[tools.webfetch]\nenabled = \"yes\"\n")
        .unwrap_err();
    assert_eq!(
        e.message,
        "line 4: [tools.webfetch] enabled: expected a boolean, found the string \"yes\""
    );
}

#[test]
fn every_limit_outside_its_ceiling_is_refused_by_name() {
    for (section, key, value) in [
        ("limits", "max_turns", "1001"),
        ("limits", "max_wall_secs", "9223372036854775807"),
        ("limits", "max_total_tokens", "1000000001"),
        ("limits", "max_tool_result_chars", "1000001"),
        ("limits", "context_tokens", "10000001"),
        ("limits", "concurrency", "257"),
        ("limits", "max_attempts", "101"),
        ("limits", "max_calls_per_turn", "65"),
        ("limits", "max_writes", "1001"),
        ("model", "max_tokens", "1000001"),
        ("runpod", "request_timeout_secs", "3601"),
        ("runpod", "poll_interval_ms", "60001"),
        ("runpod", "poll_interval_ms", "49"),
        ("tools.webfetch", "timeout_secs", "0"),
        ("tools.noteworx", "timeout_secs", "86400"),
        ("budget", "tokens_per_day", "1000000000001"),
        ("budget", "tokens_per_run", "1000000000001"),
        ("budget", "gpu_seconds_per_day", "86400001"),
    ] {
        let head = "[runpod]\nendpoint_id = \"abc\"\n";
        let nwx = "[tools.noteworx]\nbase_url = \"https://n\"\n";
        let text = match section {
            "runpod" => format!("{head}{key} = {value}\n{nwx}"),
            "tools.noteworx" => format!("{head}{nwx}{key} = {value}\n"),
            _ => format!("{head}{nwx}[{section}]\n{key} = {value}\n"),
        };
        let e = parse(&text).unwrap_err();
        let line = text.lines().position(|l| l.starts_with(key)).unwrap() + 1;
        assert!(
            e.message
                .starts_with(&format!("line {line}: [{section}] {key} = {value} is ")),
            "{section}.{key}: {e}"
        );
    }
}

#[test]
fn nan_and_inf_are_refused_wherever_a_number_goes() {
    for (text, key) in [
        ("[model]\ntemperature = nan\n", "[model] temperature"),
        ("[model]\ntop_p = inf\n", "[model] top_p"),
        ("[model.extra]\nmin_p = -inf\n", "[model.extra] min_p"),
        (
            "[model.chat_template_kwargs]\nx = [1.0, nan]\n",
            "[model.chat_template_kwargs] x",
        ),
    ] {
        let e = parse(&format!("[runpod]\nendpoint_id = \"a\"\n{text}")).unwrap_err();
        assert!(
            e.message.starts_with(&format!("line 4: {key}")),
            "{text}: {e}"
        );
    }
}

#[test]
fn a_secret_pasted_where_a_variable_name_belongs_is_refused_unseen() {
    for value in ["rp_live_AbC123secret", "my key", "1ABC", "lower_case"] {
        let e = parse(&format!(
            "[runpod]\nendpoint_id = \"a\"\napi_key_env = \"{value}\"\n"
        ))
        .unwrap_err();
        assert!(e.message.contains("[runpod] api_key_env must name"), "{e}");
        assert!(!e.to_string().contains(value), "the value is echoed: {e}");
    }
    for ok in ["RUNPOD_API_KEY", "_X", "K2"] {
        assert!(is_variable_name(ok), "{ok}");
    }
}

#[test]
fn a_secret_may_come_from_the_systemd_credentials_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("NWX_CRED"), "nwx_from_credential\n").unwrap();
    let creds = dir.path().to_string_lossy().into_owned();
    let env = |k: &str| match k {
        "CREDENTIALS_DIRECTORY" => Some(creds.clone()),
        _ => None,
    };
    let c = Config::parse(
        "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://h/v1\"\n[tools.noteworx]\nbase_url = \"https://n\"\ntoken_env = \"NWX_CRED\"\n",
        Path::new("a.toml"),
        Path::new("."),
        &env,
    )
    .unwrap();
    assert_eq!(
        c.noteworx.unwrap().token.expose(),
        "nwx_from_credential",
        "trailing newline trimmed"
    );
    let e = Config::parse(
        "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://h/v1\"\napi_key_env = \"MISSING\"\n",
        Path::new("a.toml"),
        Path::new("."),
        &env,
    )
    .unwrap_err();
    assert!(e.message.contains("MISSING"), "{e}");
}

#[test]
fn a_notification_url_may_come_from_the_environment_and_is_then_a_secret_whole() {
    const HOOK: &str = "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX";
    let env = |k: &str| match k {
        "SLACK_HOOK" => Some(HOOK.to_string()),
        "NOT_A_URL" => Some("hooks.slack.com/services/secret-path".to_string()),
        _ => None,
    };
    let load = |notify: &str, offline: bool| {
        Config::parse_as(
            &format!(
                "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://h/v1\"\n[notify]\n{notify}"
            ),
            Path::new("a.toml"),
            Path::new("."),
            &Secrets { env: &env, offline },
        )
    };
    let c = load("on_failure_url_env = \"SLACK_HOOK\"\n", false).unwrap();
    assert_eq!(c.notify.on_failure_url.as_deref(), Some(HOOK));
    assert!(
        c.secrets().iter().any(|s| s.expose() == HOOK),
        "the whole URL is redacted"
    );

    let e = load("ping_url_env = \"UNSET_PING\"\n", false).unwrap_err();
    assert!(
        e.message
            .contains("UNSET_PING (named by [notify] ping_url_env) is not set"),
        "{e}"
    );
    // Offline (status, show, …): nothing will be sent, nothing is needed.
    let c = load("ping_url_env = \"UNSET_PING\"\n", true).unwrap();
    assert_eq!(c.notify.ping_url, None);

    let e = load(
        "ping_url = \"https://hc-ping.com/abc\"\nping_url_env = \"SLACK_HOOK\"\n",
        false,
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("[notify] ping_url and ping_url_env are both set: keep one"),
        "{e}"
    );
    // A value that is no URL is named by its key, never shown.
    let e = load("on_failure_url_env = \"NOT_A_URL\"\n", false).unwrap_err();
    assert!(e.message.contains("[notify] on_failure_url"), "{e}");
    assert!(!e.message.contains("secret-path"), "{e}");
}

#[test]
fn openai_kind_needs_a_base_url() {
    let e = parse("[endpoint]\nkind = \"openai\"\n").unwrap_err();
    assert!(e.message.contains("[openai] base_url is required"), "{e}");
    let c = parse("[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://127.0.0.1:8080/v1/\"\nmodel = \"gemma\"\n").unwrap();
    assert_eq!(c.endpoint.base_url, "http://127.0.0.1:8080/v1");
    assert_eq!(c.endpoint.api_key, None);
    assert_eq!(c.endpoint.model.as_deref(), Some("gemma"));
}

#[test]
fn runpod_endpoint_url_replaces_base_and_id() {
    let c =
        parse("[runpod]\nendpoint_url = \"http://127.0.0.1:8000/\"\napi_key_env = \"\"\n").unwrap();
    assert_eq!(c.endpoint.base_url, "http://127.0.0.1:8000");
    assert_eq!(c.endpoint.api_key, None);
    let e = parse("[endpoint]\nkind = \"runpod\"\n").unwrap_err();
    assert!(e.message.contains("endpoint_id"), "{e}");
}

#[test]
fn a_missing_secret_variable_is_named() {
    let e = parse("[runpod]\nendpoint_id = \"abc\"\napi_key_env = \"MY_KEY\"\n").unwrap_err();
    assert!(e.message.contains("MY_KEY"), "{e}");
    assert!(!e.message.contains("rp_secret"));
}

#[test]
fn noteworx_is_offered_only_with_a_base_url_and_reads_its_token() {
    let c = parse("[runpod]\nendpoint_id = \"a\"\n[tools.noteworx]\nbase_url = \"https://notes.example.com/\"\n").unwrap();
    let n = c.noteworx.as_ref().unwrap();
    assert_eq!(n.base_url, "https://notes.example.com");
    assert_eq!(n.token.expose(), "nwx_secret");
    assert_eq!(format!("{:?}", n.token), "***");
    assert_eq!(c.secrets().len(), 2);
    let c = parse("[runpod]\nendpoint_id = \"a\"\n[tools.noteworx]\nenabled = false\nbase_url = \"https://n\"\n").unwrap();
    assert!(c.noteworx.is_none());
}

#[test]
fn extra_may_not_override_what_the_harness_builds() {
    let e = parse("[runpod]\nendpoint_id = \"a\"\n[model.extra]\nstream = true\n").unwrap_err();
    assert!(e.message.contains("stream"), "{e}");
    let c =
        parse("[runpod]\nendpoint_id = \"a\"\n[model.extra]\nseed = 42\nmin_p = 0.05\n").unwrap();
    assert_eq!(c.model.extra.get("seed"), Some(&Value::from(42)));
}

#[test]
fn overrides_set_dotted_keys_as_toml_values_or_strings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.toml");
    std::fs::write(
        &path,
        "[runpod]\nendpoint_id = \"a\"\n[model]\ntemperature = 1.0\n",
    )
    .unwrap();
    let env = |k: &str| (k == "RUNPOD_API_KEY").then(|| "rp_x".to_string());
    let set = |k: &str, v: &str| (k.to_string(), v.to_string());
    let c = Config::load_with(
        &path,
        &env,
        &[
            set("model.temperature", "0.3"),
            set("model.replay_thinking", "keep"),
            set("limits.max_turns", "6"),
            set("tools.webfetch.enabled", "false"),
        ],
    )
    .unwrap();
    assert_eq!(c.model.temperature, Some(0.3));
    assert_eq!(c.model.replay_thinking, ReplayThinking::Keep);
    assert_eq!(c.limits.max_turns, 6);
    assert!(c.webfetch.is_none());
    let e = Config::load_with(&path, &env, &[set("limits.max_turnz", "6")]).unwrap_err();
    assert!(e.message.contains("[limits] max_turnz: unknown key"), "{e}");
    assert!(
        e.message
            .ends_with("(with the --set / --matrix values applied)"),
        "{e}"
    );
    let e = Config::load_with(&path, &env, &[set("temperature", "1")]).unwrap_err();
    assert!(e.message.contains("write SECTION.KEY"), "{e}");
}

#[test]
fn limits_that_cannot_work_are_refused() {
    let e = parse("[runpod]\nendpoint_id = \"a\"\n[limits]\nmax_turns = 0\n").unwrap_err();
    assert!(e.message.contains("max_turns"), "{e}");
    let e = parse("[runpod]\nendpoint_id = \"a\"\n[limits]\ncontext_tokens = 2048\n").unwrap_err();
    assert!(e.message.contains("context_tokens"), "{e}");
}

#[test]
fn the_shipped_example_config_is_valid_and_documents_every_section() {
    let text = include_str!("../../../config/agent.toml.example");
    let c = parse(text).unwrap();
    assert_eq!(c.endpoint.base_url, "https://api.runpod.ai/v2/abc123xyz");
    assert_eq!(c.limits, Limits::default());
    for section in [
        "[endpoint]",
        "[runpod]",
        "[openai]",
        "[paths]",
        "[limits]",
        "[model]",
        "[model.chat_template_kwargs]",
        "[model.extra]",
        "[tools.webfetch]",
        "[tools.noteworx]",
        "[prompt]",
        "[metrics]",
        "[tls]",
    ] {
        assert!(text.contains(section), "{section} missing from the example");
    }
}

#[test]
fn secrets_never_show_in_debug_output() {
    let c = parse("[runpod]\nendpoint_id = \"abc\"\n").unwrap();
    assert!(!format!("{c:?}").contains("rp_secret"));
}

#[test]
fn a_host_list_of_urls_is_refused_naming_the_host_it_meant() {
    let host_list = |key: &str, items: &str| {
        parse(&format!(
            "[runpod]\nendpoint_id = \"abc\"\n[tools.webfetch]\n{key} = [{items}]\n"
        ))
    };
    for (item, meant) in [
        ("\"https://evil.example/\"", "evil.example"),
        ("\"http://user:pw@evil.example:8080/x\"", "evil.example"),
        ("\"evil.example:443\"", "evil.example"),
        ("\"evil.example/path\"", "evil.example"),
        ("\"me@evil.example\"", "evil.example"),
    ] {
        for key in ["allow_hosts", "deny_hosts"] {
            let e = host_list(key, item).unwrap_err().to_string();
            assert!(
                e.contains(&format!("line 4: [tools.webfetch] {key}:"))
                    && e.contains(&format!("write \"{meant}\"")),
                "{item}: {e}"
            );
        }
    }
    // Each read as webfetch's guard reads a host: punycode, no trailing
    // dot, IP addresses in their canonical form.
    let c = host_list(
        "deny_hosts",
        "\"Evil.Example\", \".sub.example\", \"[::1]\", \"0::1\", \"127.1\", \"localhost.\", \"bücher.example\"",
    )
    .unwrap();
    assert_eq!(
        c.webfetch.unwrap().deny_hosts,
        [
            "127.0.0.1",
            "::1",
            "evil.example",
            "localhost",
            "sub.example",
            "xn--bcher-kva.example"
        ]
    );
    let e = host_list("deny_hosts", "\"127.0.0.2,127.0.0.3\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("is not a host name (write each host as an item of its own)"),
        "{e}"
    );
}

#[test]
fn a_notify_url_that_is_refused_is_never_echoed() {
    let e = parse(
        "[runpod]\nendpoint_id = \"abc\"\n[notify]\nping_url = \"ftp://user:hunter2secret@hc-ping.com/0d338dcc-a054-11ec-b909-0242ac120002\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("[notify] ping_url must be an http(s) URL"),
        "{e}"
    );
    assert!(!e.contains("hunter2") && !e.contains("0d338dcc"), "{e}");
    let c = parse(
        "[runpod]\nendpoint_id = \"abc\"\n[notify]\nping_url = \"https://hc-ping.com/0d338dcc-a054-11ec-b909-0242ac120002\"\n",
    )
    .unwrap();
    assert_eq!(
        c.redactor()
            .redact_str("pinging https://hc-ping.com/0d338dcc-a054-11ec-b909-0242ac120002/start"),
        "pinging https://hc-ping.com/***/start"
    );
}

#[test]
fn budget_limits_default_to_none_and_refuse_what_is_not_a_count() {
    let c = parse("[runpod]\nendpoint_id = \"a\"\n").unwrap();
    assert!(!c.budget.any());
    let c = parse("[runpod]\nendpoint_id = \"a\"\n[budget]\ntokens_per_run = 500\n").unwrap();
    assert_eq!((c.budget.any(), c.budget.daily()), (true, false));
    for (line, problem) in [
        ("tokens_per_day = -1", "[budget] tokens_per_day"),
        ("gpu_seconds_per_day = 1.5", "[budget] gpu_seconds_per_day"),
        (
            "tokens_per_week = 5",
            "[budget] tokens_per_week: unknown key",
        ),
        (
            "tokens_per_run = 18446744073709551616",
            "[budget] tokens_per_run",
        ),
    ] {
        let e = parse(&format!(
            "[runpod]\nendpoint_id = \"a\"\n[budget]\n{line}\n"
        ))
        .unwrap_err();
        assert!(
            e.message.starts_with("line 4: ") && e.message.contains(problem),
            "{line}: {e}"
        );
    }
}

/// The config's redaction of `text`.
fn redacted_by(config: &str, text: &str) -> String {
    parse(config).unwrap().redactor().redact(text.to_string())
}

#[test]
fn the_userinfo_of_every_configured_url_is_a_secret() {
    let openai =
        |url: &str| format!("[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"{url}\"\n");
    // The review's warning line (2026-11-27, item 11), through the config's redactor.
    let warning = "error=http://bob:hunter2secretpw@127.0.0.1:18089/apply-template answered";
    assert_eq!(
        redacted_by(
            &openai("http://bob:hunter2secretpw@127.0.0.1:18089/v1"),
            warning
        ),
        "error=http://***@127.0.0.1:18089/apply-template answered"
    );
    // A user name that is the token (item 5), and a short password.
    let token_user = openai("http://ghp_TOKENUSERNAME42:x-oauth-basic@127.0.0.1:19009/v1");
    assert_eq!(
        redacted_by(
            &token_user,
            "url=http://ghp_TOKENUSERNAME42:x-oauth-basic@h/ and ghp_TOKENUSERNAME42 alone"
        ),
        "url=http://***@h/ and *** alone"
    );
    let short = openai("http://bob:pw@127.0.0.1:18089/v1");
    assert_eq!(
        redacted_by(
            &short,
            "GET http://bob:pw@127.0.0.1:18089/v1/models: a pwd for bob"
        ),
        "GET http://***@127.0.0.1:18089/v1/models: a pwd for bob",
        "the password is never shown in the URL; the word bob and the letters pw elsewhere are left"
    );
    // Every other URL key: runpod's two, noteworx's, an MCP server's.
    for config in [
        "[runpod]\nendpoint_id = \"abc\"\nbase_url = \"https://u:runpodpass1@api.example/v2\"\n",
        "[runpod]\nendpoint_url = \"https://u:runpodpass1@rp.example/v2/abc\"\n",
        "[runpod]\nendpoint_id = \"abc\"\n[tools.noteworx]\nbase_url = \"https://u:runpodpass1@notes.example\"\n",
        "[runpod]\nendpoint_id = \"abc\"\n[mcp.servers.w]\nurl = \"https://u:runpodpass1@mcp.example/mcp\"\n",
    ] {
        assert_eq!(
            redacted_by(config, "said runpodpass1."),
            "said ***.",
            "{config}"
        );
    }
    // Percent-encoded in the URL, decoded in a message: both are secrets.
    assert_eq!(
        redacted_by(
            &openai("http://bob:p%40ssw0rd@h/v1"),
            "p@ssw0rd and p%40ssw0rd"
        ),
        "*** and ***"
    );
}

#[test]
fn a_user_name_before_a_password_is_a_secret_unless_a_plain_word() {
    for plain in [
        "bob",
        "admin",
        "hookuser",
        "x-access-token",
        "oauth2",
        "user01",
        "first.last",
    ] {
        assert!(secrets::plain_user(plain), "{plain}");
    }
    for token in [
        "ghp_TOKENUSERNAME42",
        "glpat-abcdefghij0123456789",
        "a1b2c3d4",
        "user123",
        "averyveryverylongname",
        "x--y",
        "_x",
        "",
    ] {
        assert!(!secrets::plain_user(token), "{token}");
    }
}

#[test]
fn a_url_refused_at_load_is_shown_without_its_userinfo() {
    for url in [
        "ftp://bob:hunter2secretpw@h/v1",
        "http://bob:hunter2secretpw@[::1/v1",
    ] {
        let e = parse(&format!(
            "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"{url}\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("[openai] base_url"), "{e}");
        assert!(!e.contains("hunter2secretpw") && !e.contains("bob"), "{e}");
    }
}

#[test]
fn a_path_value_starting_with_tilde_slash_is_in_the_home_folder() {
    let text = "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://127.0.0.1:8080/v1\"\n\
                [paths]\ninbox = \"~/agent/tasks/inbox\"\ndone = \"~bob/done\"\nfailed = \"tasks/~/failed\"\n\
                [metrics]\ntextfile = \"~/metrics/ah.prom\"\n";
    let with_home = |k: &str| (k == "HOME").then(|| "/home/ann".to_string());
    let base = Path::new("/etc/ah");
    let cfg = Config::parse(text, Path::new("/etc/ah/agent.toml"), base, &with_home).unwrap();
    assert_eq!(
        cfg.paths.inbox,
        PathBuf::from("/home/ann/agent/tasks/inbox")
    );
    assert_eq!(
        cfg.paths.done,
        PathBuf::from("/etc/ah/~bob/done"),
        "~user/ is left"
    );
    assert_eq!(cfg.paths.failed, PathBuf::from("/etc/ah/tasks/~/failed"));
    assert_eq!(
        cfg.metrics_textfile,
        Some(PathBuf::from("/home/ann/metrics/ah.prom"))
    );
    let no_home = |_: &str| None;
    let e = Config::parse(text, Path::new("/etc/ah/agent.toml"), base, &no_home).unwrap_err();
    assert!(
        e.message.contains("[paths] inbox") && e.message.contains("HOME is not set"),
        "{e}"
    );
}

/// `text` read with an environment holding an SMTP login.
fn parse_with_login(text: &str) -> Result<Config, ConfigError> {
    let env = |k: &str| match k {
        "RUNPOD_API_KEY" => Some("rp_secret".to_string()),
        "SMTP_USERNAME" => Some("agent-bot-7f3e@example.com".to_string()),
        "SMTP_PASSWORD" => Some("smtp-pass-SECRET42".to_string()),
        _ => None,
    };
    Config::parse(
        text,
        Path::new("/etc/ah/agent.toml"),
        Path::new("/etc/ah"),
        &env,
    )
}

const RUNPOD: &str = "[runpod]\nendpoint_id = \"a\"\n";

#[test]
fn mail_is_read_with_its_login_from_the_environment_and_redacted() {
    let c = parse_with_login(&format!(
        "{RUNPOD}[notify]\ndigest_to = [\"ops@example.com\", \"On Call <oncall@example.com>\"]\ndigest_at = \"06:30\"\non_failure_mail = true\non_failure_format = \"slack\"\n[mail]\nsmtp_url = \"smtp://mail.example.com\"\nfrom = \"agent-harness <agent@example.com>\"\nusername_env = \"SMTP_USERNAME\"\npassword_env = \"SMTP_PASSWORD\"\n"
    ))
    .unwrap();
    let mail = c.mail.as_ref().unwrap();
    assert_eq!(mail.shown(), "smtp://mail.example.com:587");
    assert_eq!(mail.security, MailSecurity::Starttls);
    assert_eq!(mail.from.address(), "agent@example.com");
    assert_eq!(c.notify.digest_to.len(), 2);
    assert_eq!(c.notify.digest_at.to_string(), "06:30");
    assert!(c.notify.on_failure_mail);
    assert_eq!(c.notify.on_failure_format, FailureFormat::Slack);
    assert_eq!(
        c.redactor()
            .redact_str("login agent-bot-7f3e@example.com with smtp-pass-SECRET42"),
        "login *** with ***"
    );
    assert!(!format!("{c:?}").contains("SECRET42"));
    // A plain word of a user name is left alone, the password never.
    let plain = |user: &str| {
        let env = move |k: &str| match k {
            "RUNPOD_API_KEY" => Some("rp_secret".to_string()),
            "U" => Some(user.to_string()),
            "P" => Some("hunter2hunter2".to_string()),
            _ => None,
        };
        let text = format!(
            "{RUNPOD}[mail]\nsmtp_url = \"smtps://smtp.sendgrid.net\"\nfrom = \"a@example.com\"\nusername_env = \"U\"\npassword_env = \"P\"\n"
        );
        let c = Config::parse(&text, Path::new("/a.toml"), Path::new("/"), &env).unwrap();
        assert_eq!(
            c.mail.as_ref().unwrap().shown(),
            "smtps://smtp.sendgrid.net:465"
        );
        c.redactor()
            .redact_str("apikey hunter2hunter2")
            .into_owned()
    };
    assert_eq!(plain("apikey"), "apikey ***");
    // Defaults: 07:00, JSON, no mail.
    let c = parse(RUNPOD).unwrap();
    assert_eq!(c.notify.digest_at.to_string(), "07:00");
    assert_eq!(c.notify.on_failure_format, FailureFormat::Json);
    assert!(c.mail.is_none() && c.notify.digest_to.is_empty());
}

#[test]
fn a_digest_without_mail_or_a_bad_time_of_day_is_refused_naming_the_keys() {
    for (toml, problem) in [
        (
            "[notify]\ndigest_to = [\"ops@example.com\"]\n",
            "line 4: [notify] digest_to needs a [mail] section",
        ),
        (
            "[notify]\non_failure_mail = true\n",
            "[notify] on_failure_mail = true mails to [notify] digest_to, which names nobody",
        ),
        (
            "[notify]\ndigest_at = \"07:00\"\n",
            "[notify] digest_at is when the digest is mailed to [notify] digest_to",
        ),
        (
            "[notify]\ndigest_to = [\"ops@example.com\"]\ndigest_at = \"7am\"\n[mail]\nsmtp_url = \"smtp://m\"\nfrom = \"a@example.com\"\n",
            "line 5: [notify] digest_at: \"7am\" is not a time of day as HH:MM",
        ),
        (
            "[notify]\ndigest_to = [\"ops@example.com\"]\ndigest_at = \"24:00\"\n[mail]\nsmtp_url = \"smtp://m\"\nfrom = \"a@example.com\"\n",
            "[notify] digest_at: \"24:00\" is not a time of day",
        ),
        (
            "[notify]\ndigest_to = [\"not an address\"]\n[mail]\nsmtp_url = \"smtp://m\"\nfrom = \"a@example.com\"\n",
            "[notify] digest_to: \"not an address\" is not a mail address",
        ),
        (
            "[notify]\non_failure_format = \"xml\"\n",
            "[notify] on_failure_format",
        ),
    ] {
        let e = parse(&format!("{RUNPOD}{toml}")).unwrap_err().to_string();
        assert!(e.contains(problem), "{toml}: {e}");
    }
}

#[test]
fn an_smtp_url_is_a_server_alone_and_never_holds_a_credential() {
    for (mail, problem) in [
        (
            "smtp_url = \"smtp://bob:hunter2secret@m.example.com\"",
            "never go in the file",
        ),
        ("smtp_url = \"https://m.example.com\"", "not a https:// URL"),
        (
            "smtp_url = \"smtp://m.example.com/x?y=1\"",
            "no path or query",
        ),
        (
            "smtp_url = \"smtps://m.example.com\"\nstarttls = false",
            "starttls = false is for smtp:// only",
        ),
        ("from = \"a@example.com\"", "[mail] smtp_url is required"),
        ("smtp_url = \"smtp://m\"", "[mail] from is required"),
        (
            "smtp_url = \"smtp://m\"\nfrom = \"nobody\"",
            "[mail] from: \"nobody\" is not a mail address",
        ),
        (
            "smtp_url = \"smtp://m\"\nfrom = \"a@example.com\"\nusername_env = \"SMTP_USERNAME\"",
            "username_env and password_env go together",
        ),
        // One alone goes with nothing, set or not.
        (
            "smtp_url = \"smtp://m\"\nfrom = \"a@example.com\"\nusername_env = \"NOT_SET\"",
            "username_env and password_env go together",
        ),
        (
            "smtp_url = \"smtp://m\"\nfrom = \"a@example.com\"\npassword_env = \"NOT_SET\"",
            "username_env and password_env go together",
        ),
        (
            "smtp_url = \"smtp://m\"\nfrom = \"a@example.com\"\nusername_env = \"SMTP_USERNAME\"\npassword_env = \"SMTP_PASSWORD\"\nstarttls = false",
            "would send the password named by password_env in clear to m",
        ),
        (
            "smtp_url = \"smtp://m\"\nfrom = \"a@example.com\"\nusername_env = \"NOT_SET\"\npassword_env = \"SMTP_PASSWORD\"",
            "environment variable NOT_SET (named by [mail] username_env) is not set",
        ),
    ] {
        let e = parse_with_login(&format!("{RUNPOD}[mail]\n{mail}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(problem), "{mail}: {e}");
        assert!(!e.contains("hunter2"), "{e}");
    }
    // In clear with a login only to this machine.
    let c = parse_with_login(&format!(
        "{RUNPOD}[mail]\nsmtp_url = \"smtp://127.0.0.1:2525\"\nfrom = \"a@example.com\"\nusername_env = \"SMTP_USERNAME\"\npassword_env = \"SMTP_PASSWORD\"\nstarttls = false\n"
    ))
    .unwrap();
    let mail = c.mail.unwrap();
    assert_eq!((mail.security, mail.port), (MailSecurity::Plain, 2525));
    assert!(mail.login.is_some());
}

/// A config in `dir` with `extra` TOML, read as `load` reads it, with
/// `HOME` at `dir/home`.
fn load_in(dir: &Path, extra: &str) -> Result<Config, ConfigError> {
    let path = dir.join("agent.toml");
    std::fs::write(&path, format!("[runpod]\nendpoint_id = \"abc\"\n{extra}")).unwrap();
    let home = dir.join("home").display().to_string();
    let env = move |k: &str| match k {
        "RUNPOD_API_KEY" => Some("rp_secret".to_string()),
        "HOME" => Some(home.clone()),
        _ => None,
    };
    Config::load(&path, &env)
}

#[test]
fn tls_ca_file_is_read_at_load_beside_the_config_or_in_home() {
    let dir = tempfile::tempdir().unwrap();
    let pem = include_bytes!("../../../tests/fixtures/tls/self-signed.pem");
    std::fs::create_dir(dir.path().join("home")).unwrap();
    std::fs::write(dir.path().join("ca.pem"), pem).unwrap();
    std::fs::write(dir.path().join("home/ca.pem"), pem).unwrap();

    let c = load_in(dir.path(), "").unwrap();
    assert_eq!(c.tls.ca_file, None, "unset: nothing read");
    assert!(c.tls.trust.added().is_empty());

    let c = load_in(dir.path(), "[tls]\nca_file = \"ca.pem\"\n").unwrap();
    assert_eq!(c.tls.ca_file, Some(dir.path().join("ca.pem")));
    assert_eq!(c.tls.trust.added().len(), 1);
    assert!(
        !c.webfetch.unwrap().use_ca_file,
        "webfetch's is off by default"
    );

    let c = load_in(
        dir.path(),
        "[tools.webfetch]\nuse_ca_file = true\n[tls]\nca_file = \"~/ca.pem\"\n",
    )
    .unwrap();
    assert_eq!(c.tls.ca_file, Some(dir.path().join("home/ca.pem")));
    assert!(c.webfetch.unwrap().use_ca_file);

    let e = load_in(dir.path(), "[tls]\nca_file = \"gone.pem\"\n").unwrap_err();
    assert!(
        e.message.starts_with(&format!(
            "line 4: [tls] ca_file {}: cannot read it (",
            dir.path().join("gone.pem").display()
        )),
        "{e}"
    );
    let e = load_in(dir.path(), "[tls]\nca_dir = \"certs\"\n").unwrap_err();
    assert!(e.message.contains("[tls] ca_dir: unknown key"), "{e}");
}

#[test]
fn use_ca_file_without_a_ca_file_is_refused_naming_both_keys() {
    for webfetch in ["", "enabled = false\n"] {
        let e = parse(&format!(
            "[runpod]\nendpoint_id = \"abc\"\n[tools.webfetch]\n{webfetch}use_ca_file = true\n"
        ))
        .unwrap_err();
        assert!(
            e.message.starts_with("line ")
                && e.message
                    .contains("[tools.webfetch] use_ca_file = true needs [tls] ca_file"),
            "{e}"
        );
    }
}

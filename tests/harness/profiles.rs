//! Agent profiles and structured answers (docs/tasks.md, "Profiles" and
//! "Structured answers").

use agent_harness::agent::StopReason;
use agent_harness::records::Status;
use serde_json::{Value, json};

use crate::common::fake_noteworx::{FakeNoteworx, note};
use crate::common::*;

const PROFILES: &str = r#"
[model]
temperature = 1.0
max_tokens = 2048
[prompt]
system = "Config prompt."
[agents.scout]
role_prompt = "You are {{agent}} on task {{task}}, {{date}}, with {{tools}}."
tools = ["noteworx_read_note", "noteworx_create_attachment"]
temperature = 0.2
top_k = 10
max_tokens = 1024
answer_style = "concise"
max_writes = 1
[agents.writer]
role_prompt = "You write."
temperature = 0.7
"#;

/// The first request the fake saw.
async fn first_request(llm: &FakeLlm) -> Value {
    llm.requests().await.remove(0)
}

#[tokio::test]
async fn a_profile_sets_role_tools_and_sampling_and_the_task_overrides_it() {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "x")]).await;
    let s = scenario()
        .by_progress(vec![ok(final_answer("done"))])
        .task("a-profile", "+++\nagent = \"scout\"\n+++\nScout.")
        .task(
            "b-override",
            "+++\nagent = \"scout\"\ntemperature = 0.9\nmax_tokens = 512\ntools = [\"noteworx_read_note\"]\nsystem_prompt = \"Task prompt.\"\n+++\nOverride.",
        )
        .task("c-none", "Plain.")
        .config(PROFILES)
        .notes(&notes)
        .build()
        .await;

    s.run().await;

    let requests = s.requests().await;
    let (a, b, c) = (&requests[0], &requests[1], &requests[2]);
    let system = |r: &Value| messages(r)[0].content.as_str().to_string();
    let tools =
        |r: &Value| -> Vec<String> { sent(r).tool_names().into_iter().map(String::from).collect() };
    let sampling = |r: &Value| {
        let r = sent(r);
        (r.temperature, r.top_k, r.max_tokens)
    };
    let today = "2026-04-09"; // the harness's clock, fixed in tests
    assert_eq!(
        system(a),
        format!(
            "You are scout on task a-profile, {today}, with noteworx_read_note, noteworx_create_attachment.\n\n\
             A call, written out: {{\"name\": \"noteworx_read_note\", \"arguments\": {{\"slug\": \"...\"}}}}\n\n\
             Keep the final answer as short as the task allows."
        ),
        "every placeholder is filled"
    );
    assert_eq!(
        tools(a),
        ["noteworx_read_note", "noteworx_create_attachment"]
    );
    assert_eq!(sampling(a), (Some(0.2), Some(10), Some(1024)));
    assert_eq!(
        system(b),
        "Task prompt.\n\nA call, written out: {\"name\": \"noteworx_read_note\", \"arguments\": {\"slug\": \"...\"}}\n\nKeep the final answer as short as the task allows."
    );
    assert_eq!(tools(b), ["noteworx_read_note"]);
    assert_eq!(sampling(b), (Some(0.9), Some(10), Some(512)));
    assert_eq!(
        system(c),
        "Config prompt.\n\nA call, written out: {\"name\": \"webfetch\", \"arguments\": {\"url\": \"...\"}}",
        "the example is of the first tool that reads and takes an argument"
    );
    let (temperature, _, max_tokens) = sampling(c);
    assert_eq!((temperature, max_tokens), (Some(1.0), Some(2048)));
    assert_eq!(tools(c).len(), 7, "no profile: every configured tool");
    assert_eq!(s.summary("a-profile").agent.as_deref(), Some("scout"));
    assert_eq!(s.summary("c-none").agent, None);
}

#[tokio::test]
async fn attachments_are_signed_with_the_profile_name_and_its_write_budget_holds() {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "x"), note("m", "M", &[], "y")]).await;
    let s = scenario()
        .replies(vec![
            tool_calls(&[
                (
                    "c1",
                    "noteworx_create_attachment",
                    json!({"slug": "n", "filename": "a.md", "content": "One."}),
                ),
                (
                    "c2",
                    "noteworx_create_attachment",
                    json!({"slug": "m", "filename": "b.md", "content": "Two."}),
                ),
            ]),
            final_answer("done"),
        ])
        .task("t", "+++\nagent = \"scout\"\n+++\nAttach.")
        .config(PROFILES)
        .notes(&notes)
        .build()
        .await;

    s.run().await;

    let made = notes.attachments("n");
    assert_eq!(made.len(), 1);
    assert!(
        made[0]["content"]
            .as_str()
            .unwrap()
            .contains("\nagent_name: scout\n"),
        "{made:?}"
    );
    assert!(
        notes.attachments("m").is_empty(),
        "the profile's max_writes = 1"
    );
}

#[tokio::test]
async fn an_unknown_profile_is_an_invalid_task_and_a_bad_placeholder_a_config_error() {
    let scene = scenario()
        .replies(vec![final_answer("x")])
        .task("t", "+++\nagent = \"nobody\"\n+++\nGo.")
        .config(PROFILES)
        .ran()
        .await;
    let s = scene.summary("t");
    assert_eq!(s.stop_reason, StopReason::InvalidTask);
    assert!(s.error.unwrap().contains(
        "agent \"nobody\" is not a profile of this configuration (profiles: scout, writer)"
    ));

    let path = scene.rewrite_config("[agents.x]\nrole_prompt = \"Hi {{agent}}, {{weather}}.\"\n");
    let e = agent_harness::config::Config::load(&path, &test_env).unwrap_err();
    assert!(
        e.message
            .contains("[agents.x] role_prompt: unknown placeholder {{weather}}"),
        "{e}"
    );
    let out = assert_cmd::Command::cargo_bin("agent-harness")
        .unwrap()
        .arg("check")
        .current_dir(scene.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_profile_naming_no_tool_is_a_config_error_and_one_naming_an_unoffered_tool_a_warning() {
    let s = scenario()
        .replies(vec![final_answer("x")])
        .task("a", "+++\nagent = \"typo\"\n+++\nGo.")
        .task("b", "Plain.")
        .task("c", "+++\nagent = \"reader\"\n+++\nRead.")
        .config("[agents.typo]\ntools = [\"web_fetch\"]\n[agents.reader]\ntools = [\"noteworx_read_note\"]")
        .build()
        .await;

    let check = bin(&s).arg("check").output().unwrap();
    assert_eq!(
        check.status.code(),
        Some(2),
        "a config problem, as for `run`"
    );
    let text = String::from_utf8_lossy(&check.stdout);
    for expected in [
        "agent.toml: [agents.typo] tools: \"web_fetch\" is not a tool (tools: webfetch, noteworx_list_notes,",
        "a.md: [agents.typo] tools: \"web_fetch\" is not a tool",
        "agent.toml: [agents.reader] tools: \"noteworx_read_note\" is not offered by this configuration (offered: webfetch): a task naming this profile is invalid",
        "agent.toml: 1 config problem(s); 3 task file(s), 2 with problems, 0 with warnings",
    ] {
        assert!(text.contains(expected), "{expected}\n---\n{text}");
    }
    assert!(
        !text.contains("frontmatter"),
        "no task is blamed for its profile's frontmatter: {text}"
    );

    // Without the typo, the unoffered tool is a warning about the config,
    // not about a task file.
    s.rewrite_config("[agents.reader]\ntools = [\"noteworx_read_note\"]\n");
    let check = bin(&s).arg("check").output().unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert_contains(
        &text,
        "agent.toml: config ok with 1 warning(s); 3 task file(s), 2 with problems, 0 with warnings",
    );
    assert_eq!(
        check.status.code(),
        Some(1),
        "a.md names a profile that does not exist now"
    );
    // A profile no task names makes nothing invalid: no warning.
    std::fs::remove_file(s.root().join("tasks/inbox/c.md")).unwrap();
    let text = String::from_utf8_lossy(&bin(&s).arg("check").output().unwrap().stdout).into_owned();
    assert_contains(
        &text,
        "agent.toml: config ok; 2 task file(s), 1 with problems",
    );
    s.rewrite_config("[agents.typo]\ntools = [\"web_fetch\"]\n");

    // `run` refuses the configuration before any task is touched.
    let run = bin(&s).arg("run").output().unwrap();
    assert_eq!(run.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_contains(&stderr, "[agents.typo] tools: \"web_fetch\" is not a tool");
    assert_eq!(s.inbox(), ["a.md", "b.md"]);
    assert!(s.requests().await.is_empty());

    // A profile's max_tokens that cannot fit a fixed window is a config error.
    let path =
        s.rewrite_config("[limits]\ncontext_tokens = 4096\n[agents.big]\nmax_tokens = 8000\n");
    let e = agent_harness::config::Config::load(&path, &test_env).unwrap_err();
    assert!(
        e.message.contains(
            "[agents.big] max_tokens (8000) leaves no room for the prompt in [limits] context_tokens (4096)"
        ),
        "{e}"
    );
}

const SCHEMA: &str = r#"{"type":"object","required":["papers","top"],"additionalProperties":false,
 "properties":{"papers":{"type":"integer","minimum":0},"top":{"type":"string"}}}"#;

/// A project with `schemas/scan.json` and a task using it, its model
/// answering `replies`.
async fn schema_project(replies: Vec<Value>, frontmatter: &str) -> Scene {
    let scene = scenario()
        .replies(replies)
        .task("t", &format!("+++\n{frontmatter}\n+++\nCount the papers."))
        .config("[agents.counter]\nrole_prompt = \"Count.\"\noutput_schema = \"schemas/scan.json\"")
        .build()
        .await;
    std::fs::create_dir_all(scene.root().join("schemas")).unwrap();
    std::fs::write(scene.root().join("schemas/scan.json"), SCHEMA).unwrap();
    scene
}

#[tokio::test]
async fn a_fenced_answer_that_matches_the_schema_is_the_result() {
    let scene = schema_project(
        vec![final_answer(
            "```json\n{\"papers\": 3, \"top\": \"Tool calling\"}\n```",
        )],
        "agent = \"counter\"",
    )
    .await;

    scene.run().await;

    let s = scene.summary("t");
    assert_eq!((s.status, s.schema_checked), (Status::Succeeded, true));
    let result: Value = serde_json::from_str(
        &std::fs::read_to_string(scene.run_dir("t").join("result.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(result, json!({"papers": 3, "top": "Tool calling"}));
    let system = first_request(scene.llm()).await["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        system.starts_with(
            "Count.\n\nA call, written out: {\"name\": \"webfetch\", \"arguments\": {\"url\": \"...\"}}\n\nYour final answer must be one JSON value matching this JSON Schema"
        ),
        "the schema is described: {system}"
    );
    assert!(system.contains("\"papers\""));
}

#[tokio::test]
async fn a_wrong_answer_is_asked_for_once_more_with_the_schema_as_a_grammar() {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "x")]).await;
    let scene = scenario()
        .replies(vec![
            final_answer("Three papers."),
            final_answer("{\"papers\": 3, \"top\": \"Tool calling\"}"),
        ])
        .task(
            "t",
            "+++\noutput_schema = \"schemas/scan.json\"\n+++\nCount the papers.",
        )
        .notes(&notes)
        .build()
        .await;
    std::fs::create_dir_all(scene.root().join("schemas")).unwrap();
    std::fs::write(scene.root().join("schemas/scan.json"), SCHEMA).unwrap();

    scene.run().await;

    let s = scene.summary("t");
    assert_eq!(
        (s.status, s.schema_checked, s.turns),
        (Status::Succeeded, true, 2)
    );
    let requests = scene.requests().await;
    assert!(requests[0].get("response_format").is_none());
    assert!(
        !sent(&requests[0]).tools.is_empty(),
        "the first request offers the tools"
    );
    let repair = &requests[1];
    assert_eq!(
        sent(repair).response_format,
        Some(
            json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": serde_json::from_str::<Value>(SCHEMA).unwrap()}})
        )
    );
    assert!(
        repair.get("tools").is_none(),
        "no tools in the repair request"
    );
    assert_eq!(sent(repair).thinking(), Some(false), "and no thinking");
    let msgs = messages(repair);
    let last = msgs.last().unwrap();
    assert_eq!(last.role, Role::User);
    assert!(
        last.content.as_str().starts_with(
            "Your answer does not match the required JSON Schema:\n- the answer is not a JSON value"
        ),
        "{last:?}"
    );
    assert!(
        scene
            .run_log("t")
            .contains("asking once more, with the schema as response_format")
    );
}

#[tokio::test]
async fn a_second_wrong_answer_ends_as_invalid_answer_with_no_result() {
    let scene = schema_project(
        vec![
            final_answer("{\"papers\": -1}"),
            final_answer("{\"papers\": \"many\"}"),
        ],
        "agent = \"counter\"",
    )
    .await;

    let outcome = scene.run().await;

    assert_eq!(outcome.exit_code(), 1);
    let s = scene.summary("t");
    assert_eq!(
        (s.status, s.stop_reason, s.schema_checked),
        (Status::Failed, StopReason::InvalidAnswer, false)
    );
    let error = s.error.unwrap();
    assert!(error.contains("even when asked again"), "{error}");
    assert!(error.contains("at /papers:"), "{error}");
    assert!(!scene.run_dir("t").join("result.json").exists());
    assert_eq!(
        scene.requests().await.len(),
        2,
        "asked once more, not twice"
    );
}

/// A reply with prose around its one ```json fence is read from the fence
/// (docs/tasks.md, "Structured answers").
#[tokio::test]
async fn the_one_json_fence_in_a_chatty_answer_is_the_result() {
    let scene = schema_project(
        vec![final_answer(
            "Sure! Here is the count.\n```json\n{\"papers\": 2, \"top\": \"Evals\"}\n```\nLet me know if you need more.",
        )],
        "agent = \"counter\"",
    )
    .await;

    scene.run().await;

    let s = scene.summary("t");
    assert_eq!((s.status, s.schema_checked), (Status::Succeeded, true));
    let result: Value = serde_json::from_str(
        &std::fs::read_to_string(scene.run_dir("t").join("result.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(result, json!({"papers": 2, "top": "Evals"}));
    assert_eq!(scene.requests().await.len(), 1, "no repair was needed");
}

/// A structured answer cut at max_tokens is asked for once more, and that
/// ask is the repair: the schema goes as a grammar, no tools, thinking off.
#[tokio::test]
async fn a_cut_structured_answer_is_asked_again_with_the_schema_as_grammar() {
    let scene = schema_project(
        vec![
            reply(
                json!({"role": "assistant", "content": "```json\n{\"papers\": 2, \"top\": \"Ev"}),
                "length",
            ),
            final_answer("{\"papers\": 2, \"top\": \"Evals\"}"),
        ],
        "agent = \"counter\"",
    )
    .await;

    scene.run().await;

    let s = scene.summary("t");
    assert_eq!((s.status, s.schema_checked), (Status::Succeeded, true));
    let requests = scene.requests().await;
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1]["response_format"]["json_schema"]["schema"],
        serde_json::from_str::<Value>(SCHEMA).unwrap()
    );
    assert!(requests[1].get("tools").is_none());
    assert_eq!(sent(&requests[1]).thinking(), Some(false));
}

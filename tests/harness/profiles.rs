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

/// The system prompt of a request.
fn system(request: &Value) -> String {
    messages(request)[0].content.clone()
}

/// The names of the tools a request offered.
fn tools(request: &Value) -> Vec<String> {
    sent(request)
        .tool_names()
        .into_iter()
        .map(String::from)
        .collect()
}

/// A request's temperature, top_k and max_tokens.
fn sampling(request: &Value) -> (Option<f64>, Option<u64>, Option<u64>) {
    let r = sent(request);
    (r.temperature, r.top_k, r.max_tokens)
}

/// Three tasks run one after the other against [`PROFILES`]: `a-profile`
/// as scout, `b-override` as scout with its own settings, `c-none` with no
/// profile; the scene after the run.
async fn ran_scout_override_and_none() -> Scene {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "x")]).await;
    scenario()
        .by_progress(vec![ok(final_answer("done"))])
        .task("a-profile", "+++\nagent = \"scout\"\n+++\nScout.")
        .task(
            "b-override",
            "+++\nagent = \"scout\"\ntemperature = 0.9\nmax_tokens = 512\ntools = [\"noteworx_read_note\"]\nsystem_prompt = \"Task prompt.\"\n+++\nOverride.",
        )
        .task("c-none", "Plain.")
        .config(PROFILES)
        .notes(&notes)
        .ran()
        .await
}

#[tokio::test]
async fn a_profile_sets_role_tools_and_sampling() {
    let s = ran_scout_override_and_none().await;

    let a = first_request(s.llm()).await;
    let today = "2026-04-09"; // the harness's clock, fixed in tests
    assert_eq!(
        system(&a),
        format!(
            "You are scout on task a-profile, {today}, with noteworx_read_note, noteworx_create_attachment.\n\n\
             A call, written out: {{\"name\": \"noteworx_read_note\", \"arguments\": {{\"slug\": \"...\"}}}}\n\n\
             Keep the final answer as short as the task allows."
        ),
        "every placeholder is filled"
    );
    assert_eq!(
        tools(&a),
        ["noteworx_read_note", "noteworx_create_attachment"]
    );
    assert_eq!(sampling(&a), (Some(0.2), Some(10), Some(1024)));
    assert_eq!(s.summary("a-profile").agent.as_deref(), Some("scout"));
}

#[tokio::test]
async fn the_task_overrides_its_profile() {
    let s = ran_scout_override_and_none().await;

    let b = s.requests().await.remove(1);
    assert_eq!(
        system(&b),
        "Task prompt.\n\nA call, written out: {\"name\": \"noteworx_read_note\", \"arguments\": {\"slug\": \"...\"}}\n\nKeep the final answer as short as the task allows."
    );
    assert_eq!(tools(&b), ["noteworx_read_note"]);
    assert_eq!(sampling(&b), (Some(0.9), Some(10), Some(512)));
}

#[tokio::test]
async fn a_task_naming_no_profile_has_the_configs_prompt_sampling_and_every_tool() {
    let s = ran_scout_override_and_none().await;

    let c = s.requests().await.remove(2);
    assert_eq!(
        system(&c),
        "Config prompt.\n\nA call, written out: {\"name\": \"webfetch\", \"arguments\": {\"url\": \"...\"}}",
        "the example is of the first tool that reads and takes an argument"
    );
    let (temperature, _, max_tokens) = sampling(&c);
    assert_eq!((temperature, max_tokens), (Some(1.0), Some(2048)));
    assert_eq!(tools(&c).len(), 7, "no profile: every configured tool");
    assert_eq!(s.summary("c-none").agent, None);
}

/// A scout task whose model attaches to note `n`, then to note `m`, in
/// one turn: the notes service after the run.
async fn ran_a_scout_attaching_twice() -> FakeNoteworx {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "x"), note("m", "M", &[], "y")]).await;
    let attach = |id, slug, file, text| {
        let args = json!({"slug": slug, "filename": file, "content": text});
        (id, "noteworx_create_attachment", args)
    };
    let both = tool_calls(&[
        attach("c1", "n", "a.md", "One."),
        attach("c2", "m", "b.md", "Two."),
    ]);
    scenario()
        .replies(vec![both, final_answer("done")])
        .task("t", "+++\nagent = \"scout\"\n+++\nAttach.")
        .config(PROFILES)
        .notes(&notes)
        .ran()
        .await;
    notes
}

#[tokio::test]
async fn attachments_are_signed_with_the_profile_name() {
    let notes = ran_a_scout_attaching_twice().await;

    let signed = notes.attachments("n")[0]["content"].clone();
    assert_contains(signed.as_str().unwrap(), "\nagent_name: scout\n");
}

#[tokio::test]
async fn a_profiles_write_budget_holds() {
    let notes = ran_a_scout_attaching_twice().await;

    assert_eq!(notes.attachments("n").len(), 1);
    // The profile's max_writes = 1.
    assert!(notes.attachments("m").is_empty());
}

#[tokio::test]
async fn an_unknown_profile_is_an_invalid_task_and_a_bad_placeholder_a_config_error() {
    let scene = scenario()
        .answers(&["x"])
        .task("t", "+++\nagent = \"nobody\"\n+++\nGo.")
        .config(PROFILES)
        .ran()
        .await;
    let s = scene.summary("t");
    assert_eq!(s.stop_reason, StopReason::InvalidTask);
    assert_contains(
        s.error.unwrap(),
        "agent \"nobody\" is not a profile of this configuration (profiles: scout, writer)",
    );

    let path = scene.rewrite_config("[agents.x]\nrole_prompt = \"Hi {{agent}}, {{weather}}.\"\n");
    let e = agent_harness::config::Config::load(&path, &test_env).unwrap_err();
    assert_contains(
        &e.message,
        "[agents.x] role_prompt: unknown placeholder {{weather}}",
    );
    let out = bin(&scene).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A profile naming a tool that does not exist.
const TYPO: &str = "[agents.typo]\ntools = [\"web_fetch\"]";
/// A profile naming a tool this configuration does not offer.
const READER: &str = "[agents.reader]\ntools = [\"noteworx_read_note\"]";

/// Task `a` as profile `typo`, `b` with none, `c` as profile `reader`.
fn typo_plain_and_reader_tasks() -> Scenario {
    scenario()
        .answers(&["x"])
        .task("a", "+++\nagent = \"typo\"\n+++\nGo.")
        .task("b", "Plain.")
        .task("c", "+++\nagent = \"reader\"\n+++\nRead.")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_profile_naming_no_tool_is_a_config_error_and_one_naming_an_unoffered_tool_a_warning() {
    let s = typo_plain_and_reader_tasks()
        .config(TYPO)
        .config(READER)
        .build()
        .await;

    let check = bin(&s).arg("check").output().unwrap();
    // A config problem, as for `run`.
    assert_eq!(check.status.code(), Some(2));
    let text = stdout(&check);
    for expected in [
        "agent.toml: [agents.typo] tools: \"web_fetch\" is not a tool (tools: webfetch, noteworx_list_notes,",
        "a.md: [agents.typo] tools: \"web_fetch\" is not a tool",
        "agent.toml: [agents.reader] tools: \"noteworx_read_note\" is not offered by this configuration (offered: webfetch): a task naming this profile is invalid",
        "agent.toml: 1 config problem(s); 3 task file(s), 2 with problems, 0 with warnings",
    ] {
        assert!(text.contains(expected), "{expected}\n---\n{text}");
    }
    // No task is blamed for its profile's frontmatter.
    assert_lacks(&text, "frontmatter");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_typo_the_unoffered_tool_is_a_warning_about_the_config_not_a_task() {
    let s = typo_plain_and_reader_tasks().config(READER).build().await;

    let check = bin(&s).arg("check").output().unwrap();
    assert_contains(
        stdout(&check),
        "agent.toml: config ok with 1 warning(s); 3 task file(s), 2 with problems, 0 with warnings",
    );
    // a.md names a profile that does not exist now.
    assert_eq!(check.status.code(), Some(1));
    // A profile no task names makes nothing invalid: no warning.
    std::fs::remove_file(s.root().join("tasks/inbox/c.md")).unwrap();
    let check = bin(&s).arg("check").output().unwrap();
    assert_contains(
        stdout(&check),
        "agent.toml: config ok; 2 task file(s), 1 with problems",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn run_refuses_a_profile_naming_no_tool_before_any_task_is_touched() {
    let s = typo_plain_and_reader_tasks().config(TYPO).build().await;
    std::fs::remove_file(s.root().join("tasks/inbox/c.md")).unwrap();

    let run = bin(&s).arg("run").output().unwrap();

    assert_eq!(run.status.code(), Some(2));
    assert_contains(
        stderr(&run),
        "[agents.typo] tools: \"web_fetch\" is not a tool",
    );
    assert_eq!(s.inbox(), ["a.md", "b.md"]);
    assert!(s.requests().await.is_empty());
}

#[tokio::test]
async fn a_profiles_max_tokens_that_cannot_fit_a_fixed_window_is_a_config_error() {
    let s = scenario()
        .config("[limits]\ncontext_tokens = 4096\n[agents.big]\nmax_tokens = 8000")
        .build()
        .await;

    let e = agent_harness::config::Config::load(&s.config_path(), &test_env).unwrap_err();

    assert!(
        e.message.contains(
            "[agents.big] max_tokens (8000) leaves no room for the prompt in [limits] context_tokens (4096)"
        ),
        "{e}"
    );
}

const SCHEMA: &str = r#"{"type":"object","required":["papers","top"],"additionalProperties":false,
 "properties":{"papers":{"type":"integer","minimum":0},"top":{"type":"string"}}}"#;

/// Task `t` counting papers, `frontmatter` in front, in a project with a
/// profile `counter` whose output schema is `schemas/scan.json`.
fn counting_papers(frontmatter: &str) -> Scenario {
    scenario()
        .task("t", &format!("+++\n{frontmatter}\n+++\nCount the papers."))
        .config("[agents.counter]\nrole_prompt = \"Count.\"\noutput_schema = \"schemas/scan.json\"")
}

/// `scenario` built, with [`SCHEMA`] written as `schemas/scan.json`.
async fn with_the_schema(scenario: Scenario) -> Scene {
    let scene = scenario.build().await;
    std::fs::create_dir_all(scene.root().join("schemas")).unwrap();
    std::fs::write(scene.root().join("schemas/scan.json"), SCHEMA).unwrap();
    scene
}

/// Task `t` as profile `counter`, its model answering `replies`.
async fn counter_answering(replies: Vec<Value>) -> Scene {
    with_the_schema(counting_papers("agent = \"counter\"").replies(replies)).await
}

/// [`SCHEMA`] as JSON.
fn schema() -> Value {
    serde_json::from_str(SCHEMA).unwrap()
}

/// The `result.json` of task `t`'s run.
fn result(scene: &Scene) -> Value {
    let text = std::fs::read_to_string(scene.run_dir("t").join("result.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn a_fenced_answer_that_matches_the_schema_is_the_result() {
    let answer = "```json\n{\"papers\": 3, \"top\": \"Tool calling\"}\n```";
    let scene = counter_answering(vec![final_answer(answer)]).await;

    scene.run().await;

    let s = scene.summary("t");
    assert_eq!((s.status, s.schema_checked), (Status::Succeeded, true));
    assert_eq!(result(&scene), json!({"papers": 3, "top": "Tool calling"}));
    let system = system(&first_request(scene.llm()).await);
    assert!(
        system.starts_with(
            "Count.\n\nA call, written out: {\"name\": \"webfetch\", \"arguments\": {\"url\": \"...\"}}\n\nYour final answer must be one JSON value matching this JSON Schema"
        ),
        "the schema is described: {system}"
    );
    assert_contains(&system, "\"papers\"");
}

/// Task `t` with `schemas/scan.json` as its output schema (it names no
/// profile; the config has `[agents.counter]`),
/// answered in prose, then in JSON: the scene after one run.
async fn ran_a_wrong_then_right_answer() -> Scene {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "x")]).await;
    let answers = [
        "Three papers.",
        "{\"papers\": 3, \"top\": \"Tool calling\"}",
    ];
    let task = counting_papers("output_schema = \"schemas/scan.json\"")
        .answers(&answers)
        .notes(&notes);
    let scene = with_the_schema(task).await;
    scene.run().await;
    scene
}

#[tokio::test]
async fn a_wrong_answer_is_asked_for_once_more_saying_what_is_wrong() {
    let scene = ran_a_wrong_then_right_answer().await;

    let s = scene.summary("t");
    assert_eq!((s.status, s.turns), (Status::Succeeded, 2));
    assert!(s.schema_checked);
    let msgs = messages(&scene.requests().await[1]);
    let last = msgs.last().unwrap();
    assert_eq!(last.role, Role::User);
    assert!(
        last.content.as_str().starts_with(
            "Your answer does not match the required JSON Schema:\n- the answer is not a JSON value"
        ),
        "{last:?}"
    );
    let log = scene.run_log("t");
    assert_contains(&log, "asking once more, with the schema as response_format");
}

#[tokio::test]
async fn the_ask_once_more_has_the_schema_as_a_grammar_and_no_tools() {
    let scene = ran_a_wrong_then_right_answer().await;

    let requests = scene.requests().await;
    assert!(requests[0].get("response_format").is_none());
    assert!(
        !sent(&requests[0]).tools.is_empty(),
        "the first request offers the tools"
    );
    let repair = &requests[1];
    let grammar =
        json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema()}});
    assert_eq!(sent(repair).response_format, Some(grammar));
    assert!(
        repair.get("tools").is_none(),
        "no tools in the repair request"
    );
    assert_eq!(sent(repair).thinking(), Some(false), "and no thinking");
}

#[tokio::test]
async fn a_second_wrong_answer_ends_as_invalid_answer_with_no_result() {
    let scene = counter_answering(vec![
        final_answer("{\"papers\": -1}"),
        final_answer("{\"papers\": \"many\"}"),
    ])
    .await;

    let outcome = scene.run().await;

    assert_eq!(outcome.exit_code(), 1);
    let s = scene.summary("t");
    assert_eq!(s.status, Status::Failed);
    assert_eq!(s.stop_reason, StopReason::InvalidAnswer);
    assert!(!s.schema_checked);
    let error = s.error.unwrap();
    assert!(error.contains("even when asked again"), "{error}");
    assert!(error.contains("at /papers:"), "{error}");
    assert!(!scene.run_dir("t").join("result.json").exists());
    let requests = scene.requests().await;
    assert_eq!(requests.len(), 2, "asked once more, not twice");
}

/// A reply with prose around its one ```json fence is read from the fence
/// (docs/tasks.md, "Structured answers").
#[tokio::test]
async fn the_one_json_fence_in_a_chatty_answer_is_the_result() {
    let scene = counter_answering(vec![final_answer(
        "Sure! Here is the count.\n```json\n{\"papers\": 2, \"top\": \"Evals\"}\n```\nLet me know if you need more.",
    )])
    .await;

    scene.run().await;

    let s = scene.summary("t");
    assert_eq!((s.status, s.schema_checked), (Status::Succeeded, true));
    assert_eq!(result(&scene), json!({"papers": 2, "top": "Evals"}));
    assert_eq!(scene.requests().await.len(), 1, "no repair was needed");
}

/// A structured answer cut at max_tokens is asked for once more, and that
/// ask is the repair: the schema goes as a grammar, no tools, thinking off.
#[tokio::test]
async fn a_cut_structured_answer_is_asked_again_with_the_schema_as_grammar() {
    let cut_off = cut("```json\n{\"papers\": 2, \"top\": \"Ev");
    let fixed = final_answer("{\"papers\": 2, \"top\": \"Evals\"}");
    let scene = counter_answering(vec![cut_off, fixed]).await;

    scene.run().await;

    let s = scene.summary("t");
    assert_eq!((s.status, s.schema_checked), (Status::Succeeded, true));
    let requests = scene.requests().await;
    assert_eq!(requests.len(), 2);
    let repair = &requests[1];
    assert_eq!(repair["response_format"]["json_schema"]["schema"], schema());
    assert!(repair.get("tools").is_none());
    assert_eq!(sent(repair).thinking(), Some(false));
}

//! The one way a test arranges a project: what the model answers, the
//! tasks, the config differences; then `run()` and the records back as
//! types. In the spirit of codex's `test_codex()`:
//!
//! ```ignore
//! let s = notes_task(&notes)
//!     .calls(vec![("noteworx_list_notes", json!({}))], "done")
//!     .config("[limits]\nmax_turns = 3")
//!     .ran()
//!     .await;
//! assert_eq!(s.summary("t").status, Status::Succeeded);
//! ```
//!
//! The presets say the common arrangements: [`offline`] (a model at a
//! closed port), [`notes_task`], [`Scenario::answers`],
//! [`Scenario::calls`]; `.build()` instead of `.ran()` when the test runs
//! the scene itself (with options, the binary, twice).
//!
//! A [`Scene`] is its [`Project`] (`Deref`), so every reader of the
//! records (`summary`, `tool_lines`, `conversation`, `done()`, …) is there.

use std::ops::Deref;
use std::path::{Path, PathBuf};

use agent_harness::agent::deps::TaskDeps;
use agent_harness::config::Config;
use agent_harness::drain::{RunOptions, RunOutcome};
use serde_json::Value;
use wiremock::ResponseTemplate;

use super::fake_noteworx::FakeNoteworx;
use super::{FakeLlm, Project, final_answer, harness, run_options, test_env, tool_calls};

/// What answers the model's requests.
enum Model {
    /// A fake answering these 200 bodies in order ([`FakeLlm::replies`]).
    Replies(Vec<Value>),
    /// A fake answering these responses in order ([`FakeLlm::start`]).
    Script(Vec<ResponseTemplate>),
    /// A fake answering by how far each conversation has got
    /// ([`FakeLlm::by_progress`]).
    ByProgress(Vec<ResponseTemplate>),
    /// A fake started by the test.
    Given(FakeLlm),
    /// No fake: the `[openai] base_url` is this.
    At(String),
}

/// How `agent.toml` is written.
enum ConfigFile {
    /// `[endpoint] kind = "openai"` at the model, then the differences.
    Openai,
    /// Exactly this text (a RunPod endpoint, a broken file, …).
    Verbatim(String),
    /// None at all.
    Absent,
}

/// A project being arranged; [`Scenario::build`] starts it.
pub struct Scenario {
    model: Model,
    tasks: Vec<(String, String)>,
    recurring: Vec<(String, String)>,
    config: String,
    file: ConfigFile,
    env: fn(&str) -> Option<String>,
}

/// A closed port's endpoint: the model of a project whose test asks none.
pub const CLOSED_URL: &str = "http://127.0.0.1:9/v1";

/// A project whose model answers nothing (a closed port): for what asks
/// no model, or a run that must stop before it does.
pub fn offline() -> Scenario {
    scenario().endpoint_at(CLOSED_URL)
}

/// The common notes task: `t`, "Work with my notes.", against `notes`.
pub fn notes_task(notes: &FakeNoteworx) -> Scenario {
    scenario().task("t", "Work with my notes.").notes(notes)
}

/// A scenario with no task, an empty config and a model that answers
/// nothing (a 500) until told otherwise.
pub fn scenario() -> Scenario {
    Scenario {
        model: Model::Replies(Vec::new()),
        tasks: Vec::new(),
        recurring: Vec::new(),
        config: String::new(),
        file: ConfigFile::Openai,
        env: test_env,
    }
}

impl Scenario {
    /// The model answers these 200 bodies in order, then repeats the last.
    pub fn replies(mut self, replies: Vec<Value>) -> Self {
        self.model = Model::Replies(replies);
        self
    }

    /// The model answers these final answers in order, then repeats the last.
    pub fn answers(self, answers: &[&str]) -> Self {
        self.replies(answers.iter().map(|a| final_answer(a)).collect())
    }

    /// The model makes these calls, one a turn (`c1`, `c2`, …), then
    /// answers `answer`.
    pub fn calls(self, calls: Vec<(&str, Value)>, answer: &str) -> Self {
        let mut replies: Vec<Value> = (1..)
            .zip(calls)
            .map(|(i, (name, args))| tool_calls(&[(&format!("c{i}"), name, args)]))
            .collect();
        replies.push(final_answer(answer));
        self.replies(replies)
    }

    /// The model answers these responses (any status, delay) in order.
    pub fn script(mut self, script: Vec<ResponseTemplate>) -> Self {
        self.model = Model::Script(script);
        self
    }

    /// The model answers reply `k` to a request carrying `k` tool results:
    /// any number of tasks can follow the same script at once.
    pub fn by_progress(mut self, replies: Vec<ResponseTemplate>) -> Self {
        self.model = Model::ByProgress(replies);
        self
    }

    /// The model is a fake the test started (a counting one, one with
    /// routes of its own).
    pub fn llm(mut self, llm: FakeLlm) -> Self {
        self.model = Model::Given(llm);
        self
    }

    /// No fake model: the endpoint is `base_url` (a closed port, another
    /// fake).
    pub fn endpoint_at(mut self, base_url: &str) -> Self {
        self.model = Model::At(base_url.to_string());
        self
    }

    /// A task in the inbox, `name.md`.
    pub fn task(mut self, name: &str, text: &str) -> Self {
        self.tasks.push((name.to_string(), text.to_string()));
        self
    }

    /// A recurring task, `tasks/recurring/name.md`.
    pub fn recurring(mut self, name: &str, text: &str) -> Self {
        self.recurring.push((name.to_string(), text.to_string()));
        self
    }

    /// TOML added after `[endpoint]` and `[openai]`.
    pub fn config(mut self, toml: &str) -> Self {
        self.config.push_str(toml);
        self.config.push('\n');
        self
    }

    /// The notes service's section (`[tools.noteworx]` at `notes`).
    pub fn notes(self, notes: &FakeNoteworx) -> Self {
        let section = notes.config_section();
        self.config(&section)
    }

    /// `agent.toml` is exactly `text`.
    pub fn config_file(mut self, text: &str) -> Self {
        self.file = ConfigFile::Verbatim(text.to_string());
        self
    }

    /// No `agent.toml` at all.
    pub fn no_config_file(mut self) -> Self {
        self.file = ConfigFile::Absent;
        self
    }

    /// The environment the config is read with (default [`test_env`]).
    pub fn env(mut self, env: fn(&str) -> Option<String>) -> Self {
        self.env = env;
        self
    }

    /// Starts the model and writes the project.
    pub async fn build(self) -> Scene {
        let url = self.model_url();
        let llm = match self.model {
            Model::Replies(replies) => Some(FakeLlm::replies(replies).await),
            Model::Script(script) => Some(FakeLlm::start(script).await),
            Model::ByProgress(replies) => Some(FakeLlm::by_progress(replies).await),
            Model::Given(llm) => Some(llm),
            Model::At(_) => None,
        };
        let base_url = llm.as_ref().map_or(url, FakeLlm::base_url);
        let project = Project::new();
        for (name, text) in &self.tasks {
            project.task(name, text);
        }
        for (name, text) in &self.recurring {
            project.recurring(name, text);
        }
        match &self.file {
            ConfigFile::Openai => {
                project.write_config(&base_url, &self.config);
            }
            ConfigFile::Verbatim(text) => {
                std::fs::write(project.config_path(), text).unwrap();
            }
            ConfigFile::Absent => {}
        }
        Scene {
            llm,
            project,
            env: self.env,
        }
    }

    /// Builds the scene and runs its inbox once, as `run` does.
    pub async fn ran(self) -> Scene {
        let scene = self.build().await;
        scene.run().await;
        scene
    }

    /// As [`Scenario::build`], for a test that is not async (its fake
    /// model, if any, serves on wiremock's own thread and keeps answering).
    pub fn build_blocking(self) -> Scene {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(self.build())
    }

    fn model_url(&self) -> String {
        match &self.model {
            Model::At(url) => url.clone(),
            _ => String::new(),
        }
    }
}

/// A project arranged by a [`Scenario`]: its model, its files, its runs.
pub struct Scene {
    llm: Option<FakeLlm>,
    pub project: Project,
    env: fn(&str) -> Option<String>,
}

impl Deref for Scene {
    type Target = Project;

    fn deref(&self) -> &Project {
        &self.project
    }
}

impl Scene {
    /// The fake model (a scene built with [`Scenario::endpoint_at`] has none).
    pub fn llm(&self) -> &FakeLlm {
        self.llm
            .as_ref()
            .expect("this scene has no fake model (built with endpoint_at)")
    }

    /// `agent.toml` as the program reads it, with the scene's environment.
    pub fn cfg(&self) -> Config {
        Config::load(&self.config_path(), &self.env)
            .unwrap_or_else(|e| panic!("the scene's config does not load: {e:#}"))
    }

    /// The task dependencies of a run: the fixed clock, fast retries.
    pub fn deps(&self) -> TaskDeps {
        harness(&self.cfg())
    }

    /// Runs the whole inbox, one task at a time, as `run` does.
    pub async fn run(&self) -> RunOutcome {
        self.run_with(run_options(1, false)).await
    }

    /// Runs the whole inbox with these options; the MCP servers it
    /// started are stopped after, as `run` does.
    pub async fn run_with(&self, opts: RunOptions) -> RunOutcome {
        let cfg = self.cfg();
        let deps = harness(&cfg);
        let out = agent_harness::app::run_inbox(&cfg, &deps, &opts)
            .await
            .unwrap();
        deps.shutdown().await;
        out
    }

    /// Writes `agent.toml` again for the same endpoint with `extra` after
    /// `[endpoint]` and `[openai]`: for a config naming the project's own
    /// files (a pid file, a marker folder), known once the scene is built,
    /// or one a test changes between runs.
    pub fn rewrite_config(&self, extra: &str) -> PathBuf {
        let text = std::fs::read_to_string(self.config_path()).unwrap();
        let table: toml::Table = text.parse().unwrap();
        let base_url = table["openai"]["base_url"].as_str().unwrap();
        self.project.write_config(base_url, extra)
    }

    /// The model of the runs that follow: a new fake answering `replies`
    /// in order (as [`Scenario::replies`]), `agent.toml` rewritten for it
    /// with `toml` added. [`Scene::llm`] stays the first one; keep the new
    /// one: a dropped fake answers nothing.
    #[must_use = "the fake stops answering when dropped"]
    pub async fn then_replies(&self, replies: Vec<Value>, toml: &str) -> FakeLlm {
        self.then(FakeLlm::replies(replies).await, toml)
    }

    /// As [`Scene::then_replies`], the new fake answering `script` in
    /// order (as [`Scenario::script`]).
    #[must_use = "the fake stops answering when dropped"]
    pub async fn then_script(&self, script: Vec<ResponseTemplate>, toml: &str) -> FakeLlm {
        self.then(FakeLlm::start(script).await, toml)
    }

    /// As [`Scene::then_replies`], the new fake answering by progress
    /// (as [`Scenario::by_progress`]).
    #[must_use = "the fake stops answering when dropped"]
    pub async fn then_by_progress(&self, replies: Vec<ResponseTemplate>, toml: &str) -> FakeLlm {
        self.then(FakeLlm::by_progress(replies).await, toml)
    }

    fn then(&self, llm: FakeLlm, toml: &str) -> FakeLlm {
        self.project.write_config(&llm.base_url(), toml);
        llm
    }

    /// The chat requests the model received, in order.
    pub async fn requests(&self) -> Vec<Value> {
        self.llm().requests().await
    }

    /// `args` run by the binary in the project (blocking: a scene whose
    /// fake must answer the binary uses [`Scene::binary_async`]).
    pub fn binary(&self, args: &[&str]) -> std::process::Output {
        super::run_binary(&self.project, args)
    }

    /// `args` run by the binary off the test's runtime, so the fakes it
    /// calls keep answering.
    pub async fn binary_async(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = super::harness_command();
        cmd.args(args).current_dir(self.root());
        tokio::task::spawn_blocking(move || cmd.output().unwrap())
            .await
            .unwrap()
    }
}

impl Project {
    /// `agent.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.root().join("agent.toml")
    }

    /// Writes `tasks/recurring/name.md`.
    pub fn recurring(&self, name: &str, text: &str) -> PathBuf {
        let dir = self.root().join("tasks/recurring");
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{name}.md"));
        std::fs::write(&p, text).unwrap();
        p
    }

    /// The run folders of `task`, oldest first.
    pub fn run_dirs(&self, task: &str) -> Vec<PathBuf> {
        let mut runs: Vec<PathBuf> = std::fs::read_dir(self.root().join("logs").join(task))
            .into_iter()
            .flatten()
            .map(|e| e.unwrap().path())
            .collect();
        runs.sort();
        runs
    }
}

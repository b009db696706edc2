//! A scripted RunPod serverless endpoint: `/runsync`, `/status/{id}`
//! (optionally refusing GET with 405, as the `runpod` package's local server
//! does) and `/cancel/{id}`, under any prefix.

use serde_json::{Value, json};
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::Script;

pub const KEY: &str = "rp_test_key_1234abcd";

pub struct FakeRunpod {
    pub server: MockServer,
}

/// A job in a non-final or failed state.
pub fn job(id: &str, status: &str) -> Value {
    json!({"id": id, "status": status})
}

/// A completed job carrying a chat response, with RunPod's timings.
pub fn completed(id: &str, output: Value, delay_ms: u64, exec_ms: u64) -> Value {
    json!({"id": id, "status": "COMPLETED", "output": output, "delayTime": delay_ms, "executionTime": exec_ms})
}

impl FakeRunpod {
    pub async fn start(
        runsync: Vec<ResponseTemplate>,
        status: Vec<ResponseTemplate>,
        refuse_get_status: bool,
    ) -> FakeRunpod {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path_regex(r"/runsync$"))
            .respond_with(Script::new(runsync))
            .mount(&server)
            .await;
        if refuse_get_status {
            Mock::given(method("GET"))
                .and(path_regex(r"/status/[^/]+$"))
                .respond_with(ResponseTemplate::new(405))
                .mount(&server)
                .await;
            Mock::given(method("POST"))
                .and(path_regex(r"/status/[^/]+$"))
                .respond_with(Script::new(status))
                .mount(&server)
                .await;
        } else {
            Mock::given(method("GET"))
                .and(path_regex(r"/status/[^/]+$"))
                .respond_with(Script::new(status))
                .mount(&server)
                .await;
        }
        Mock::given(method("GET"))
            .and(path_regex(r"/health$"))
            .respond_with(ResponseTemplate::new(200).set_body_json(
                json!({"jobs": {"completed": 0, "inQueue": 0}, "workers": {"idle": 1, "running": 0}}),
            ))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path_regex(r"/cancel/[^/]+$"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({"status": "CANCELLED"})))
            .mount(&server)
            .await;
        FakeRunpod { server }
    }

    /// `[endpoint]` + `[runpod]` sections using `base_url` + `endpoint_id` (the hosted layout).
    pub fn config_sections(&self) -> String {
        format!(
            "[endpoint]\nkind = \"runpod\"\n[runpod]\nbase_url = \"{}/v2\"\nendpoint_id = \"ep123\"\npoll_interval_ms = 50\n",
            self.server.uri()
        )
    }

    /// A project with `tasks` (name, text) in its inbox and its config for
    /// this endpoint with `extra` TOML added.
    pub fn project(
        &self,
        tasks: &[(&str, &str)],
        extra: &str,
    ) -> (super::Project, agent_harness::config::Config) {
        let project = super::Project::new();
        for (name, text) in tasks {
            project.task(name, text);
        }
        let path = project.root().join("agent.toml");
        std::fs::write(&path, format!("{}{extra}\n", self.config_sections())).unwrap();
        let cfg = agent_harness::config::Config::load(&path, &super::test_env).unwrap();
        (project, cfg)
    }

    /// `(method, path)` of every request, in order.
    pub async fn calls(&self) -> Vec<(String, String)> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .map(|r| (r.method.to_string(), r.url.path().to_string()))
            .collect()
    }

    pub async fn runsync_bodies(&self) -> Vec<Value> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|r| r.url.path().ends_with("/runsync"))
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect()
    }
}

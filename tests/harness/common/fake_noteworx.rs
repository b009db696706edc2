//! An in-memory noteworx implementing the routes the harness's client calls
//! (`crates/tools/src/noteworx/client.rs`): notes, search, attachments, bearer
//! auth. It records state so tests can assert on what was created, and can be
//! told to fail the next requests with a status.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub const TOKEN: &str = "nwx_test_token_9f8e7d6c";

#[derive(Default)]
pub struct State {
    pub notes: Vec<Value>,
    pub attachments: BTreeMap<String, Vec<Value>>,
    next_id: u64,
    /// Statuses to answer the next requests with, before the real handling.
    pub fail_next: VecDeque<u16>,
}

pub struct FakeNoteworx {
    pub server: MockServer,
    pub state: Arc<Mutex<State>>,
}

struct Handler(Arc<Mutex<State>>);

pub fn note(slug: &str, title: &str, tags: &[&str], content: &str) -> Value {
    json!({"slug": slug, "title": title, "tags": tags, "space": "work", "updated_at": "2026-04-01T10:00:00Z", "content": content})
}

impl FakeNoteworx {
    pub async fn start(notes: Vec<Value>) -> FakeNoteworx {
        Self::serve(MockServer::start().await, notes).await
    }

    /// The same on a listener of the caller's (a fixed port, for the quickstart).
    pub async fn start_on(listener: std::net::TcpListener, notes: Vec<Value>) -> FakeNoteworx {
        Self::serve(
            MockServer::builder().listener(listener).start().await,
            notes,
        )
        .await
    }

    /// A note may carry `"attachments": [{filename, content_type, content}]`
    /// (as `examples/notes.json` does): they are added to it, not listed in it.
    async fn serve(server: MockServer, mut notes: Vec<Value>) -> FakeNoteworx {
        let seeded: Vec<(String, Vec<Value>)> = notes
            .iter_mut()
            .filter_map(|n| {
                let list = n.as_object_mut()?.remove("attachments")?;
                Some((n["slug"].as_str()?.to_string(), list.as_array()?.clone()))
            })
            .collect();
        let state = Arc::new(Mutex::new(State {
            notes,
            ..State::default()
        }));
        Mock::given(wiremock::matchers::any())
            .respond_with(Handler(state.clone()))
            .mount(&server)
            .await;
        let fake = FakeNoteworx { server, state };
        for (slug, list) in seeded {
            for a in list {
                let field = |k: &str| a[k].as_str().unwrap_or("").to_string();
                fake.add_attachment(
                    &slug,
                    &field("filename"),
                    &field("content_type"),
                    &field("content"),
                );
            }
        }
        fake
    }

    pub fn uri(&self) -> String {
        self.server.uri()
    }

    /// The `[tools.noteworx]` section pointing here.
    pub fn config_section(&self) -> String {
        self.config_section_waiting(5)
    }

    /// As [`FakeNoteworx::config_section`], each request given
    /// `timeout_secs`: for answers of many MiB, which a loaded machine
    /// serves slowly.
    pub fn config_section_waiting(&self, timeout_secs: u64) -> String {
        format!(
            "[tools.noteworx]\nbase_url = \"{}\"\nagent_name = \"test-agent\"\ntimeout_secs = {timeout_secs}\n",
            self.uri()
        )
    }

    pub fn attachments(&self, slug: &str) -> Vec<Value> {
        self.state
            .lock()
            .unwrap()
            .attachments
            .get(slug)
            .cloned()
            .unwrap_or_default()
    }

    pub fn add_attachment(
        &self,
        slug: &str,
        filename: &str,
        content_type: &str,
        content: &str,
    ) -> String {
        let mut s = self.state.lock().unwrap();
        s.next_id += 1;
        let id = s.next_id.to_string();
        let a = json!({"id": id, "filename": filename, "content_type": content_type, "size": content.len(),
                       "created_at": "2026-04-01T10:00:00Z", "content": content});
        s.attachments.entry(slug.to_string()).or_default().push(a);
        id
    }

    pub fn fail_next(&self, statuses: &[u16]) {
        self.state.lock().unwrap().fail_next.extend(statuses);
    }

    /// `(method, path and query)` of every request received.
    pub async fn calls(&self) -> Vec<(String, String)> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .map(|r| {
                (
                    r.method.to_string(),
                    format!(
                        "{}{}",
                        r.url.path(),
                        r.url.query().map(|q| format!("?{q}")).unwrap_or_default()
                    ),
                )
            })
            .collect()
    }

    pub async fn authorization_headers(&self) -> Vec<String> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .map(|r| {
                r.headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    }
}

fn decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&segment[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn error(status: u16, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(json!({"error": message}))
}

impl Respond for Handler {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let mut s = self.0.lock().unwrap();
        let auth = req
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if auth != format!("Bearer {TOKEN}") {
            return error(401, "invalid token");
        }
        if let Some(status) = s.fail_next.pop_front() {
            return error(status, "injected failure");
        }
        let segments: Vec<String> = req
            .url
            .path_segments()
            .map(|p| p.map(decode).collect())
            .unwrap_or_default();
        let query: BTreeMap<String, String> = req
            .url
            .query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let limit = query
            .get("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .unwrap_or(100);
        let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
        match (req.method.as_str(), seg.as_slice()) {
            ("GET", ["api", "notes"]) => {
                let notes: Vec<Value> = s
                    .notes
                    .iter()
                    .filter(|n| {
                        query
                            .get("space")
                            .is_none_or(|sp| n["space"] == sp.as_str())
                    })
                    .filter(|n| {
                        query.get("tag").is_none_or(|t| {
                            n["tags"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .any(|x| x == t.as_str())
                        })
                    })
                    .take(limit)
                    .cloned()
                    .collect();
                ResponseTemplate::new(200).set_body_json(json!({"notes": notes}))
            }
            ("GET", ["api", "notes", "search"]) => {
                let q = query.get("q").cloned().unwrap_or_default().to_lowercase();
                let notes: Vec<Value> = s
                    .notes
                    .iter()
                    .filter(|n| {
                        n["title"]
                            .as_str()
                            .unwrap_or("")
                            .to_lowercase()
                            .contains(&q)
                            || n["content"]
                                .as_str()
                                .unwrap_or("")
                                .to_lowercase()
                                .contains(&q)
                    })
                    .take(limit)
                    .map(|n| {
                        let mut n = n.clone();
                        n["score"] = json!(0.75);
                        n
                    })
                    .collect();
                ResponseTemplate::new(200).set_body_json(json!({"notes": notes}))
            }
            ("GET", ["api", "notes", slug]) => match s.notes.iter().find(|n| n["slug"] == *slug) {
                Some(n) => ResponseTemplate::new(200).set_body_json(n.clone()),
                None => error(404, "note not found"),
            },
            ("GET", ["api", "notes", slug, "attachments"]) => {
                let list: Vec<Value> = s
                    .attachments
                    .get(*slug)
                    .into_iter()
                    .flatten()
                    .map(|a| {
                        let mut a = a.clone();
                        a.as_object_mut().unwrap().remove("content");
                        a
                    })
                    .collect();
                ResponseTemplate::new(200).set_body_json(json!({"attachments": list}))
            }
            ("GET", ["api", "notes", slug, "attachments", id]) => {
                match s
                    .attachments
                    .get(*slug)
                    .into_iter()
                    .flatten()
                    .find(|a| a["id"] == *id)
                {
                    Some(a) => ResponseTemplate::new(200).set_body_json(a.clone()),
                    None => error(404, "attachment not found"),
                }
            }
            ("POST", ["api", "notes", slug, "attachments"]) => {
                if !s.notes.iter().any(|n| n["slug"] == *slug) {
                    return error(404, "note not found");
                }
                let body: Value = match serde_json::from_slice(&req.body) {
                    Ok(v) => v,
                    Err(_) => return error(422, "body is not JSON"),
                };
                let (Some(filename), Some(content)) =
                    (body["filename"].as_str(), body["content"].as_str())
                else {
                    return error(422, "filename and content are required");
                };
                s.next_id += 1;
                let id = s.next_id.to_string();
                let a = json!({"id": id, "filename": filename, "content_type": body["content_type"], "size": content.len(),
                               "created_at": "2026-04-09T06:15:14Z", "content": content});
                s.attachments
                    .entry(slug.to_string())
                    .or_default()
                    .push(a.clone());
                let mut shown = a;
                shown.as_object_mut().unwrap().remove("content");
                ResponseTemplate::new(201).set_body_json(shown)
            }
            _ => error(404, "no such route"),
        }
    }
}

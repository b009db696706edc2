//! Attempt counts of retryable tasks, kept beside the inbox.

use super::*;

/// Attempt counts of retryable tasks, by task name: `<state_dir>/.agent-harness-attempts.json`.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempts {
    #[serde(flatten)]
    counts: BTreeMap<String, u32>,
}

impl Attempts {
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join(".agent-harness-attempts.json")
    }

    /// Loads the counts; a missing or unreadable file counts as empty (and is logged).
    pub fn load(state_dir: &Path) -> Attempts {
        let path = Self::path(state_dir);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "attempt state unreadable; starting from zero");
                Attempts::default()
            }),
            Err(_) => Attempts::default(),
        }
    }

    /// Attempts already counted for `name` in earlier runs.
    pub fn get(&self, name: &str) -> u32 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    pub fn set(&mut self, name: &str, count: u32) {
        self.counts.insert(name.to_string(), count);
    }

    pub fn clear(&mut self, name: &str) {
        self.counts.remove(name);
    }

    /// Keeps the counts of the names `keep` accepts; says whether any went.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) -> bool {
        let before = self.counts.len();
        self.counts.retain(|name, _| keep(name));
        self.counts.len() != before
    }

    /// Writes the state atomically (temporary file, then rename).
    pub fn save(&self, state_dir: &Path) -> anyhow::Result<()> {
        let path = Self::path(state_dir);
        if self.counts.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    Err(e).with_context(|| format!("removing {}", path.display()))
                }
                _ => Ok(()),
            };
        }
        std::fs::create_dir_all(state_dir)
            .with_context(|| format!("creating {}", state_dir.display()))?;
        let tmp = path.with_extension("json.tmp");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::io::Write::write_all(&mut file, &serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }
}

//! The slips a config can hold that nothing else would say (docs/operating.md,
//! `check`): a placeholder the project ships left in (a RunPod endpoint
//! id, the noteworx URL), a
//! recurring folder spelt wrong beside the one the config names, a `[mail]`
//! section nothing sends through, and the `[model.extra]` keys, which go to
//! the server untouched (a misspelt one is ignored there, silently).

use std::path::Path;

use harness_config::{
    Config, EXAMPLE_ENDPOINT_ID, EXAMPLE_NOTES_URL, EndpointKind, README_ENDPOINT_ID,
};

/// The placeholders the project ships (the example's and the README's
/// RunPod endpoint id, the package's noteworx URL) still in the config:
/// requests would go to an endpoint or a notes service that is not yours.
pub(crate) fn placeholders(cfg: &Config) -> Vec<String> {
    let ep = &cfg.endpoint;
    let id = ep.base_url.rsplit('/').next();
    let endpoint = [EXAMPLE_ENDPOINT_ID, README_ENDPOINT_ID]
        .into_iter()
        .find(|p| ep.kind == EndpointKind::Runpod && id == Some(*p))
        .map(|p| {
            format!(
                "[runpod] endpoint_id is a placeholder ({p:?}): set your endpoint's id (RunPod's console, Serverless)"
            )
        });
    let notes = cfg
        .noteworx
        .as_ref()
        .filter(|n| n.base_url.trim_end_matches('/') == EXAMPLE_NOTES_URL)
        .map(|_| {
            format!(
                "[tools.noteworx] base_url is a placeholder ({EXAMPLE_NOTES_URL:?}): set your noteworx's URL, or \"\" for no noteworx tools"
            )
        });
    endpoint.into_iter().chain(notes).collect()
}

/// A `[mail]` section while `[notify] digest_to` names nobody: no mail is
/// ever sent through it (docs/operating.md, "Digest and mail").
pub(crate) fn unused_mail(cfg: &Config) -> Option<String> {
    (cfg.mail.is_some() && cfg.notify.digest_to.is_empty()).then(|| {
        "warning: [mail] is set, but [notify] digest_to names nobody, so no mail is ever sent: add the addresses to digest_to, or remove [mail]".into()
    })
}

/// When `[paths] recurring` does not exist (no recurring tasks, which is
/// normal), each folder beside it or beside the inbox whose name is one or
/// two letters from it (`tasks/recuring/`): its tasks would never run.
pub(crate) fn recurring_near_misses(cfg: &Config) -> Vec<String> {
    let wanted = &cfg.paths.recurring;
    let Some(name) = wanted.file_name().and_then(|n| n.to_str()) else {
        return Vec::new();
    };
    if std::fs::symlink_metadata(wanted).is_ok() {
        return Vec::new();
    }
    let mut places: Vec<&Path> = wanted.parent().into_iter().collect();
    let state = cfg.paths.state_dir();
    if !places.contains(&state.as_path()) {
        places.push(&state);
    }
    let mut found = Vec::new();
    for place in places {
        let Ok(entries) = std::fs::read_dir(place) else {
            continue;
        };
        let mut near: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| n != name && close(&n.to_lowercase(), &name.to_lowercase()))
            .collect();
        near.sort();
        found.extend(near.into_iter().map(|n| {
            format!(
                "warning: [paths] recurring: {} does not exist, but {} does: did you mean {}/? (its tasks never run)",
                wanted.display(),
                place.join(&n).display(),
                wanted.display()
            )
        }));
    }
    found
}

/// The request fields llama-server, vLLM and Ollama read that a config is
/// likely to set: a `[model.extra]` key one or two letters from one of
/// them, and not one itself, is most likely misspelt.
const KNOWN_EXTRA: &[&str] = &[
    "seed",
    "min_p",
    "typical_p",
    "top_n_sigma",
    "tool_choice",
    "parallel_tool_calls",
    "repeat_penalty",
    "repeat_last_n",
    "presence_penalty",
    "frequency_penalty",
    "dry_multiplier",
    "dry_base",
    "dry_allowed_length",
    "dry_penalty_last_n",
    "xtc_probability",
    "xtc_threshold",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "stop",
    "n_probs",
    "logit_bias",
    "grammar",
    "json_schema",
    "response_format",
    "cache_prompt",
    "samplers",
    "logprobs",
    "top_logprobs",
    "min_tokens",
    "repetition_penalty",
];

/// `[model.extra]`'s keys, said (`sent to the server untouched: …`), and a
/// warning for each that looks like a misspelt known field.
pub(crate) fn extra_keys(cfg: &Config) -> (Option<String>, Vec<String>) {
    let keys: Vec<&String> = cfg.model.extra.keys().collect();
    if keys.is_empty() {
        return (None, Vec::new());
    }
    let note = format!(
        "[model.extra]: sent to the server untouched: {}",
        keys.iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let warnings = keys
        .iter()
        .filter(|k| !KNOWN_EXTRA.contains(&k.as_str()))
        .filter_map(|k| {
            let meant = KNOWN_EXTRA.iter().find(|known| close(k, known))?;
            Some(format!(
                "warning: [model.extra] {k}: not a field the server knows by that name, so it is ignored there; did you mean {meant}?"
            ))
        })
        .collect();
    (Some(note), warnings)
}

/// `a` and `b` differ, by at most two edits (one for names under five
/// letters).
fn close(a: &str, b: &str) -> bool {
    let most = if b.chars().count() < 5 { 1 } else { 2 };
    a != b && edits(a, b) <= most
}

/// The Levenshtein distance: the letters to insert, remove or change.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut last = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (last + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            last = here;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_names_are_one_or_two_edits_apart() {
        assert_eq!(edits("recuring", "recurring"), 1);
        assert_eq!(edits("reccuring", "recurring"), 2);
        assert!(close("recuring", "recurring"));
        assert!(close("repeat_penaltly", "repeat_penalty"));
        assert!(!close("recurring", "recurring"));
        assert!(!close("done", "recurring"));
        assert!(!close("stops", "seed"));
    }
}

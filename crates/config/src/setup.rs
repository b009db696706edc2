//! Setup faults (docs/operating.md, "Setup faults"): the answers that say the
//! setup is wrong, not the task — a refused key, a wrong route, an unknown
//! RunPod endpoint id or model, a refused notes token. This module is the one
//! place that decides which answers those are and what the operator is told:
//! the loop stops the run with these words, and `test-runpod` prints the same
//! ones.

use crate::EndpointKind;

/// HTTP statuses of a chat request that mean the setup is wrong: no retry
/// and no other task will get a different answer (docs/operating.md,
/// "Setup faults"): 401, 403, 404, 405 and 501 (a server that takes no
/// POST there: another service on the port); 402 (the account cannot pay)
/// and 407 (a proxy wants credentials) say the same of the account and the
/// network (docs/design.md).
pub fn is_endpoint_fault(status: u16) -> bool {
    matches!(status, 401 | 402 | 403 | 404 | 405 | 407 | 501)
}

/// llama-server's refusals that no retry and no other task mends: it must
/// be started otherwise (docs/operating.md, "Endpoints and retries"). A server
/// started without `--jinja` answers every request with tools `500 tools param
/// requires --jinja flag`. Matched on its whole message, the only place the
/// harness reads a server's words, and only before the endpoint answered in
/// this run (after that a message could quote anything).
pub fn is_server_refusal(status: u16, message: &str) -> bool {
    status == 500 && message.trim() == "tools param requires --jinja flag"
}

/// HTTP statuses from noteworx that mean the token is refused.
pub fn is_noteworx_fault(status: u16) -> bool {
    matches!(status, 401 | 403)
}

/// Whether an endpoint's refusal stops the run, once it is known whether
/// the endpoint already answered a chat request in this run. After an
/// answer the route works, so a 403, 404 or 405 is about what that one
/// request carried (a page that trips a firewall): the task's, or such
/// content would block the inbox forever, since a setup fault counts no
/// attempt. A 401, 402 or 407 is about credentials, the account or a
/// proxy — never content — so it stops the run whenever it comes (a key
/// rotated while a run goes on files nothing).
pub fn endpoint_refusal_stops(status: u16, answered: bool) -> bool {
    is_endpoint_fault(status) && (!answered || matches!(status, 401 | 402 | 407))
}

/// The same for noteworx: a 401 always, a 403 only until a call of this
/// run was answered (after that it is about one note).
pub fn noteworx_refusal_stops(status: u16, answered: bool) -> bool {
    is_noteworx_fault(status) && (!answered || status == 401)
}

/// What the endpoint setup looks like, for naming the key to fix.
#[derive(Debug, Clone, Copy)]
pub struct EndpointSetup<'a> {
    pub kind: EndpointKind,
    /// The variable `api_key_env` names, when a key is configured.
    pub key_var: Option<&'a str>,
}

/// What follows the harness's own words in a setup fault's diagnosis: the
/// server's, last, so a message for a person can end before them
/// ([`in_own_words`]).
pub const SERVER_SAID: &str = ". The server said: ";

/// A diagnosis up to the server's words: what the webhook, the mails, the
/// ping and the digest say (a server may quote the request, and so the
/// model). The harness's own words never hold [`SERVER_SAID`], so the
/// first one starts the server's.
pub fn in_own_words(diagnosis: &str) -> &str {
    diagnosis
        .split_once(SERVER_SAID)
        .map_or(diagnosis, |(own, _)| own)
}

/// `. The server said: MESSAGE`, clipped and escaped; nothing for none.
fn server_said(message: &str) -> String {
    let message = message.trim();
    if message.is_empty() {
        return String::new();
    }
    format!(
        "{SERVER_SAID}{}",
        harness_base::text::printable(&harness_base::text::clip(message, 300))
    )
}

/// One line: what the endpoint's `status` means and which key to fix, then
/// the server's own words (`message`) after [`SERVER_SAID`].
pub fn endpoint_diagnosis(setup: EndpointSetup<'_>, status: u16, message: &str) -> String {
    let section = match setup.kind {
        EndpointKind::Runpod => "[runpod]",
        EndpointKind::Openai => "[openai]",
    };
    let key = match setup.key_var {
        Some(var) => format!("{var} (the variable named by {section} api_key_env)"),
        None => format!("{section} api_key_env: no key is configured, and this server wants one"),
    };
    let answer = format!("HTTP {status}");
    let own = match (status, setup.kind) {
        (401 | 403, _) => format!("the endpoint refused the API key ({answer}); check {key}"),
        (402, _) => format!(
            "the endpoint's account cannot pay for the request ({answer}); check its balance or plan"
        ),
        (407, _) => format!(
            "a proxy between here and the endpoint wants credentials ({answer}); check the HTTPS_PROXY / HTTP_PROXY settings of the service"
        ),
        (500, _) if is_server_refusal(status, message) => format!(
            "llama-server refuses tool requests: it runs without its Jinja chat templates ({answer}); start it with --jinja (and for Gemma 4 its template, --chat-template-file)"
        ),
        (404, EndpointKind::Runpod) => {
            format!("no such endpoint ({answer}); check [runpod] endpoint_id or endpoint_url")
        }
        (404, EndpointKind::Openai) => format!(
            "no chat route or no such model there ({answer}); check [openai] base_url \
             (llama-server: http://HOST:PORT/v1) and [openai] model"
        ),
        (200..=299, EndpointKind::Openai) => format!(
            "the endpoint answered with something that is no chat completion ({answer}): another service is on that port; check [openai] base_url (llama-server: http://HOST:PORT/v1)"
        ),
        (200..=299, EndpointKind::Runpod) => format!(
            "the endpoint answered with something that is no chat completion ({answer}): that URL is not a RunPod endpoint, or its worker is not llama-server's; check [runpod] endpoint_id, base_url or endpoint_url"
        ),
        (_, EndpointKind::Runpod) => format!(
            "the endpoint does not take a chat request there ({answer}); check [runpod] base_url, endpoint_id or endpoint_url"
        ),
        (_, EndpointKind::Openai) => format!(
            "the endpoint does not take a chat request there ({answer}); check [openai] base_url \
             (llama-server: http://HOST:PORT/v1)"
        ),
    };
    own + &server_said(message)
}

/// One line: noteworx refused the token, then its own words.
pub fn noteworx_diagnosis(token_env: &str, status: u16, message: &str) -> String {
    format!(
        "noteworx refused the token (HTTP {status}); check {token_env} (the variable named by [tools.noteworx] token_env){}",
        server_said(message)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_setup_answers_are_faults() {
        let faults: Vec<u16> = (100..600).filter(|s| is_endpoint_fault(*s)).collect();
        assert_eq!(faults, [401, 402, 403, 404, 405, 407, 501]);
        let faults: Vec<u16> = (100..600).filter(|s| is_noteworx_fault(*s)).collect();
        assert_eq!(faults, [401, 403]);
    }

    #[test]
    fn after_an_answer_only_credentials_stop_the_run() {
        let stops = |answered| {
            (100..600)
                .filter(|s| endpoint_refusal_stops(*s, answered))
                .collect::<Vec<u16>>()
        };
        assert_eq!(stops(false), [401, 402, 403, 404, 405, 407, 501]);
        assert_eq!(stops(true), [401, 402, 407]);
        assert!(noteworx_refusal_stops(403, false) && !noteworx_refusal_stops(403, true));
        assert!(noteworx_refusal_stops(401, true));
    }

    #[test]
    fn each_diagnosis_names_the_key_to_fix() {
        let runpod = EndpointSetup {
            kind: EndpointKind::Runpod,
            key_var: Some("RUNPOD_API_KEY"),
        };
        let openai = EndpointSetup {
            kind: EndpointKind::Openai,
            key_var: None,
        };
        let d = endpoint_diagnosis(runpod, 401, "Unauthorized");
        assert!(
            d.contains("RUNPOD_API_KEY (the variable named by [runpod] api_key_env)"),
            "{d}"
        );
        assert!(
            d.contains("(HTTP 401)") && d.ends_with(". The server said: Unauthorized"),
            "{d}"
        );
        let d = endpoint_diagnosis(openai, 403, "no");
        assert!(
            d.contains("[openai] api_key_env: no key is configured"),
            "{d}"
        );
        assert!(endpoint_diagnosis(runpod, 404, "x").contains("[runpod] endpoint_id"));
        assert!(endpoint_diagnosis(openai, 404, "x").contains("[openai] base_url"));
        assert!(endpoint_diagnosis(openai, 405, "x").contains("[openai] base_url"));
        let d = noteworx_diagnosis("NOTEWORX_TOKEN", 401, "bad token");
        assert_eq!(
            d,
            "noteworx refused the token (HTTP 401); check NOTEWORX_TOKEN (the variable named by [tools.noteworx] token_env). The server said: bad token"
        );
    }

    #[test]
    fn a_diagnosis_ends_with_the_servers_words_which_own_words_leave_out() {
        let setup = EndpointSetup {
            kind: EndpointKind::Openai,
            key_var: Some("KEY"),
        };
        let said = endpoint_diagnosis(setup, 401, "bad key. The server said: (quoting) the prompt");
        assert_eq!(
            said,
            "the endpoint refused the API key (HTTP 401); check KEY (the variable named by [openai] api_key_env). The server said: bad key. The server said: (quoting) the prompt"
        );
        assert_eq!(
            in_own_words(&said),
            "the endpoint refused the API key (HTTP 401); check KEY (the variable named by [openai] api_key_env)"
        );
        assert_eq!(
            endpoint_diagnosis(setup, 404, "  "),
            in_own_words(&endpoint_diagnosis(setup, 404, "Not Found"))
        );
        let n = noteworx_diagnosis("NWX", 401, "token \u{1b}[31mexpired");
        assert!(
            n.ends_with(". The server said: token \\u{1b}[31mexpired"),
            "{n}"
        );
        assert_eq!(
            in_own_words(&n),
            "noteworx refused the token (HTTP 401); check NWX (the variable named by [tools.noteworx] token_env)"
        );
        assert_eq!(in_own_words("no server words"), "no server words");
    }
}

//! What `[prompt]` adds for small models when a task offers tools
//! (docs/configuration.md, "[prompt]"): a preamble on how calling works
//! after whichever system prompt the task has (the built-in one, the
//! config's, a profile's role prompt or its own), one call written out, and
//! tool descriptions that open with their arguments.

use serde_json::Value;

use harness_config::PromptAids;
use harness_tools::Tool;
use harness_wire::reply::OfferedTool;

/// How calling works, in words a small model follows.
pub(crate) const TOOL_PREAMBLE: &str = "\
Tools: to use one, call it; a tool runs only when your reply is the call itself. \
Never describe a call instead of making it, and never say you used a tool whose result you have not seen. \
After each result, call the next tool you need, or give your final answer in plain text.";

/// With `[prompt] result_note`, the user line after each turn's tool
/// results. Measured on the stand-in (Qwen's template makes a tool result a
/// user turn): after a result it ended its turn at once with probability
/// 0.32 (the first token `<|im_end|>`); with this line after the result, 0.00.
pub(crate) const RESULT_NOTE: &str =
    "Go on with the task: call the next tool you need, or give your final answer.";

/// The system prompt with the aids `aids` turns on, for a task offering `tools`.
pub(crate) fn with_aids(prompt: String, aids: PromptAids, tools: &[Tool]) -> String {
    if tools.is_empty() {
        return prompt;
    }
    let mut prompt = prompt;
    if aids.tool_preamble {
        prompt = format!("{prompt}\n\n{TOOL_PREAMBLE}");
    }
    if aids.call_example {
        prompt = format!("{prompt}\n\n{}", call_example(tools));
    }
    prompt
}

/// One call written out as JSON: the first of `tools` that takes a
/// required argument (else the first), each required argument a `...`.
/// Read-only tools come first: a model that copies the example verbatim
/// must not write with it.
pub(crate) fn call_example(tools: &[Tool]) -> String {
    let defs: Vec<Value> = tools
        .iter()
        .filter(|t| !t.is_write())
        .chain(tools.iter().filter(|t| t.is_write()))
        .map(Tool::definition)
        .collect();
    let required = |d: &Value| OfferedTool::of(d).required;
    let def = defs
        .iter()
        .find(|d| !required(d).is_empty())
        .unwrap_or(&defs[0]);
    let arguments: Vec<String> = required(def)
        .into_iter()
        .map(|name| {
            let example = match def["function"]["parameters"]["properties"][&name]["type"].as_str()
            {
                Some("integer" | "number") => "0",
                Some("boolean") => "true",
                _ => "\"...\"",
            };
            format!("{}: {example}", Value::from(name))
        })
        .collect();
    // Written as a model writes it: the name first.
    format!(
        "A call, written out: {{\"name\": {}, \"arguments\": {{{}}}}}",
        def["function"]["name"],
        arguments.join(", ")
    )
}

/// A tool's definition as sent; with `argument_hints`, its description
/// opens with its arguments, the required ones named so.
pub(crate) fn definition(tool: &Tool, aids: PromptAids) -> Value {
    let mut def = tool.definition();
    if !aids.argument_hints {
        return def;
    }
    let required = OfferedTool::of(&def).required;
    let Some(properties) = def["function"]["parameters"]["properties"].as_object() else {
        return def;
    };
    let args: Vec<String> = properties
        .iter()
        .map(|(name, schema)| {
            let kind = schema["type"].as_str().unwrap_or("value");
            if required.contains(name) {
                format!("{name} ({kind}, required)")
            } else {
                format!("{name} ({kind})")
            }
        })
        .collect();
    let hint = if args.is_empty() {
        "Arguments: none.".to_string()
    } else {
        format!("Arguments: {}.", args.join(", "))
    };
    let description = def["function"]["description"].as_str().unwrap_or("");
    def["function"]["description"] = Value::from(format!("{hint} {description}").trim_end());
    def
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness_tools::ToolName;

    const ALL: PromptAids = PromptAids {
        tool_preamble: true,
        call_example: true,
        argument_hints: true,
        result_note: true,
    };

    const OFF: PromptAids = PromptAids {
        tool_preamble: false,
        call_example: false,
        argument_hints: false,
        result_note: false,
    };

    #[test]
    fn the_aids_reach_any_prompt_of_a_task_with_tools_and_none_without() {
        let tools = [
            Tool::Builtin(ToolName::NoteworxListNotes),
            Tool::Builtin(ToolName::NoteworxReadNote),
        ];
        let prompt = with_aids("You are a role prompt.".into(), ALL, &tools);
        assert_eq!(
            prompt,
            format!(
                "You are a role prompt.\n\n{TOOL_PREAMBLE}\n\nA call, written out: {{\"name\": \"noteworx_read_note\", \"arguments\": {{\"slug\": \"...\"}}}}"
            ),
            "the example is of the first tool that takes a required argument"
        );
        assert_eq!(with_aids("Bare.".into(), ALL, &[]), "Bare.");
        assert_eq!(with_aids("Off.".into(), OFF, &tools), "Off.");
    }

    #[test]
    fn the_example_is_of_a_tool_that_only_reads_when_there_is_one() {
        let tools = [
            Tool::Builtin(ToolName::NoteworxCreateAttachment),
            Tool::Builtin(ToolName::Webfetch),
        ];
        assert!(call_example(&tools).contains("\"name\": \"webfetch\""));
        let only_write = [Tool::Builtin(ToolName::NoteworxCreateAttachment)];
        assert!(call_example(&only_write).contains("noteworx_create_attachment"));
    }

    #[test]
    fn argument_hints_open_the_description_and_name_the_required() {
        let tool = Tool::Builtin(ToolName::NoteworxReadNote);
        let plain = definition(&tool, OFF);
        let hinted = definition(&tool, ALL);
        let text = hinted["function"]["description"].as_str().unwrap();
        assert!(
            text.starts_with("Arguments: ") && text.contains("slug (string, required)"),
            "{text}"
        );
        assert!(text.contains("offset (integer)") && !text.contains("offset (integer, required)"));
        assert!(text.ends_with(plain["function"]["description"].as_str().unwrap()));
        assert_eq!(
            hinted["function"]["parameters"], plain["function"]["parameters"],
            "only the description changes"
        );
    }
}

//! A `tools/call` answer as a tool result: text content joined, other
//! content described by its type and size (never inlined), structured
//! content shown when there is no text, `isError` an error result.

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

use crate::ToolOutput;

/// The result the model is given; the loop redacts, cuts and defangs it.
pub(super) fn output(result: CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = result.content.iter().map(describe).collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    if result.is_error == Some(true) {
        let text = if text.trim().is_empty() {
            "The tool reported an error without a message.".to_string()
        } else {
            text
        };
        ToolOutput::error(text)
    } else if text.is_empty() {
        ToolOutput::ok("The tool returned nothing.")
    } else {
        ToolOutput::ok(text)
    }
}

fn describe(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => format!(
            "[image content: {}, {} bytes of base64, not shown]",
            short(&i.mime_type),
            i.data.len()
        ),
        ContentBlock::Audio(a) => format!(
            "[audio content: {}, {} bytes of base64, not shown]",
            short(&a.mime_type),
            a.data.len()
        ),
        ContentBlock::Resource(r) => match &r.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => {
                format!("[resource {}]\n{text}", short(uri))
            }
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => format!(
                "[resource {}: {}, {} bytes of base64, not shown]",
                short(uri),
                short(mime_type.as_deref().unwrap_or("binary")),
                blob.len()
            ),
            _ => "[a resource of a kind this harness does not read, not shown]".to_string(),
        },
        ContentBlock::ResourceLink(link) => format!("[resource link: {}]", short(&link.uri)),
        _ => "[content of a kind this harness does not read, not shown]".to_string(),
    }
}

fn short(s: &str) -> String {
    harness_base::text::clip(s, 200)
}

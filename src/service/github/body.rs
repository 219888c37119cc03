//! The JSON bodies of check-run and comment requests, cut to GitHub's limits (pure).

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use super::error::GitHubError;
use super::types::{
    Annotation, CheckAction, CheckOutput, Conclusion, MAX_ANNOTATION_MESSAGE_BYTES,
    MAX_ANNOTATION_TITLE_CHARS, MAX_ANNOTATIONS_PER_REQUEST, MAX_COMMENT_CHARS, MAX_OUTPUT_CHARS,
    Status,
};

/// What replaces the end of a text that was too long.
const TRUNCATED: &str = "\n\n… (truncated)";

pub(super) fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// `status`, `conclusion` and `completed_at` as GitHub wants them together: a conclusion
/// completes the run (with `completed_at` now unless given); `completed` needs a conclusion.
pub(super) fn put_status(
    body: &mut Map<String, Value>,
    status: Option<Status>,
    conclusion: Option<Conclusion>,
    completed_at: Option<DateTime<Utc>>,
) -> Result<(), GitHubError> {
    match conclusion {
        Some(conclusion) => {
            body.insert("status".into(), json!(Status::Completed.as_str()));
            body.insert("conclusion".into(), json!(conclusion.as_str()));
            let at = completed_at.unwrap_or_else(Utc::now);
            body.insert("completed_at".into(), json!(timestamp(at)));
        }
        None => {
            if status == Some(Status::Completed) || completed_at.is_some() {
                return Err(GitHubError::InvalidInput(
                    "a completed check run needs a conclusion".into(),
                ));
            }
            if let Some(status) = status {
                body.insert("status".into(), json!(status.as_str()));
            }
        }
    }
    Ok(())
}

pub(super) fn actions_json(actions: &[CheckAction]) -> Result<Value, GitHubError> {
    if actions.len() > 3 {
        return Err(GitHubError::InvalidInput(format!(
            "{} check-run actions (GitHub takes at most 3)",
            actions.len()
        )));
    }
    let mut out = Vec::with_capacity(actions.len());
    for a in actions {
        for (what, text, max) in [
            ("label", &a.label, 20),
            ("description", &a.description, 40),
            ("identifier", &a.identifier, 20),
        ] {
            if text.chars().count() > max {
                return Err(GitHubError::InvalidInput(format!(
                    "check-run action {what} {text:?} is longer than {max} characters"
                )));
            }
        }
        out.push(json!({
            "label": a.label,
            "description": a.description,
            "identifier": a.identifier,
        }));
    }
    Ok(Value::Array(out))
}

/// title, summary and text (cut to GitHub's limits).
pub(super) fn output_head(output: &CheckOutput) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("title".into(), json!(output.title));
    out.insert(
        "summary".into(),
        json!(cut_chars(&output.summary, MAX_OUTPUT_CHARS, "summary")),
    );
    if let Some(text) = &output.text {
        out.insert(
            "text".into(),
            json!(cut_chars(text, MAX_OUTPUT_CHARS, "text")),
        );
    }
    out
}

/// The output object with the first batch of annotations, and the annotations left over.
pub(super) fn output_json(output: &CheckOutput) -> (Value, &[Annotation]) {
    let mut out = output_head(output);
    let split = output.annotations.len().min(MAX_ANNOTATIONS_PER_REQUEST);
    let (first, rest) = output.annotations.split_at(split);
    if !first.is_empty() {
        out.insert(
            "annotations".into(),
            Value::Array(first.iter().map(annotation_json).collect()),
        );
    }
    (Value::Object(out), rest)
}

pub(super) fn annotation_json(a: &Annotation) -> Value {
    let mut out = Map::new();
    out.insert("path".into(), json!(a.path));
    let start = a.start_line.max(1);
    out.insert("start_line".into(), json!(start));
    out.insert("end_line".into(), json!(a.end_line.max(start)));
    out.insert("annotation_level".into(), json!(a.level.as_str()));
    out.insert(
        "message".into(),
        json!(cut_bytes(&a.message, MAX_ANNOTATION_MESSAGE_BYTES)),
    );
    if let Some(title) = &a.title {
        out.insert(
            "title".into(),
            json!(cut_chars(
                title,
                MAX_ANNOTATION_TITLE_CHARS,
                "annotation title"
            )),
        );
    }
    Value::Object(out)
}

/// `text` cut to at most `max` characters, ending with a note when cut.
fn cut_chars(text: &str, max: usize, what: &str) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    tracing::warn!(what, max, "cutting an over-long check-run text");
    let note = if max > TRUNCATED.chars().count() * 4 {
        TRUNCATED
    } else {
        ""
    };
    let keep = max - note.chars().count();
    let mut out: String = text.chars().take(keep).collect();
    out.push_str(note);
    out
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut_bytes(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max - TRUNCATED.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{TRUNCATED}", &text[..end])
}

pub(super) fn check_comment(body: &str) -> Result<(), GitHubError> {
    let n = body.chars().count();
    if n > MAX_COMMENT_CHARS {
        return Err(GitHubError::InvalidInput(format!(
            "a comment body of {n} characters (GitHub takes at most {MAX_COMMENT_CHARS})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_to_the_limit() {
        let long = "é".repeat(MAX_OUTPUT_CHARS + 10);
        let cut = cut_chars(&long, MAX_OUTPUT_CHARS, "summary");
        assert_eq!(cut.chars().count(), MAX_OUTPUT_CHARS);
        assert!(cut.ends_with(TRUNCATED));
        assert_eq!(cut_chars("short", 10, "x"), "short");
        let bytes = cut_bytes(&"é".repeat(40_000), MAX_ANNOTATION_MESSAGE_BYTES);
        assert!(bytes.len() <= MAX_ANNOTATION_MESSAGE_BYTES);
    }

    #[test]
    fn a_conclusion_completes_the_run() {
        let mut body = Map::new();
        put_status(
            &mut body,
            Some(Status::InProgress),
            Some(super::Conclusion::Failure),
            None,
        )
        .unwrap();
        assert_eq!(body["status"], "completed");
        assert_eq!(body["conclusion"], "failure");
        assert!(body.contains_key("completed_at"));
        let mut body = Map::new();
        assert!(put_status(&mut body, Some(Status::Completed), None, None).is_err());
    }
}

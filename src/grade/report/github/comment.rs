//! The sticky PR comment and the replies to commands.

use std::fmt::Write;

use super::*;

/// The sticky PR comment, edited in place for every head: the marker, one section for
/// `head_sha` (the report when there is one, else only `status_line`), and one line of
/// earlier heads. `history` is `(sha, verdict)` pairs, newest first; the current head is
/// skipped if it is among them. At most [`COMMENT_LIMIT`] characters.
pub fn sticky_comment(
    head_sha: &str,
    report: Option<&Report>,
    status_line: &str,
    history: &[(String, String)],
) -> String {
    let mut doc = Doc::new(COMMENT_LIMIT);
    doc.push(&format!(
        "{STICKY_MARKER}\n### InfraDev grade for {}\n\n",
        sha(head_sha)
    ));
    if let Some(report) = report {
        doc.push(&format!(
            "**{}**: {}\n\n",
            verdict_word(report.grade.verdict),
            headline(report)
        ));
    }
    let status = status_line.trim();
    if !status.is_empty() {
        doc.push(&format!("{status}\n\n"));
    }
    if let Some(report) = report {
        comment_body(&mut doc, report);
    }
    let earlier: Vec<&(String, String)> = history.iter().filter(|(s, _)| s != head_sha).collect();
    let mut footer = String::new();
    if !earlier.is_empty() {
        let shown: Vec<String> = earlier
            .iter()
            .take(HISTORY_SHOWN)
            .map(|(s, verdict)| format!("{} {}", sha(s), clean(verdict, 40)))
            .collect();
        let _ = write!(footer, "Previous heads: {}", shown.join(" · "));
        if earlier.len() > HISTORY_SHOWN {
            let _ = write!(footer, " · and {} earlier", earlier.len() - HISTORY_SHOWN);
        }
        footer.push_str("\n\n");
    }
    footer.push_str(
        "<sub>This comment is edited for every new head. Hidden probes are never shown, only \
         what each one requires.</sub>\n",
    );
    doc.close("item");
    doc.force(&footer);
    doc.finish("item")
}

/// Reply to a command from someone who may not run it.
pub fn reply_not_permitted(user: &str, command: &str) -> String {
    format!(
        "@{} you are not permitted to run {} on this repository; ask a maintainer to run it.",
        login(user),
        code(&format!("/infradev {}", command.trim()), 60)
    )
}

/// Reply to a command we do not know; `known_commands` are the words after `/infradev`.
pub fn reply_unknown_command(user: &str, command: &str, known_commands: &[&str]) -> String {
    let known: Vec<String> = known_commands
        .iter()
        .map(|c| code(&format!("/infradev {c}"), 60))
        .collect();
    let mut reply = format!(
        "@{} unknown command {}.",
        login(user),
        code(&format!("/infradev {}", command.trim()), 60)
    );
    if !known.is_empty() {
        let _ = write!(reply, " Known commands: {}.", known.join(", "));
    }
    reply
}

pub(super) fn comment_body(doc: &mut Doc, report: &Report) {
    let counts = &report.grade.counts;
    if counts.total.total() > 0 {
        doc.push(if report.grade.verdict == Verdict::Error {
            "**What went wrong**\n\n"
        } else {
            "**Failure categories**\n\n"
        });
        for category in Category::ALL
            .into_iter()
            .filter(|&c| counts.total.get(c) > 0)
        {
            let (official, probes) = (counts.official.get(category), counts.probes.get(category));
            let mut found = Vec::new();
            if official > 0 {
                found.push(format!(
                    "{official} official {}",
                    plural(official, "test", "tests")
                ));
            }
            if probes > 0 {
                found.push(format!(
                    "{probes} hidden {}",
                    plural(probes, "probe", "probes")
                ));
            }
            let mut found = found.join(", ");
            if category == Category::Infra {
                found.push_str(" could not be run");
            }
            let advice = if category == Category::Infra {
                format!("*Your tests:* {}.", category_advice(category))
            } else {
                format!(
                    "*Your own tests should have checked:* {}.",
                    category_advice(category)
                )
            };
            doc.push(&format!(
                "- **{category}** ({found}): {}. {advice}\n",
                category_meaning(category)
            ));
        }
        doc.push("\n");
    }
    doc.push(&flaky_note(report));
    if let Some(error) = &report.apply_error {
        doc.push(&format!(
            "The change does not apply: {}\n\n",
            code(error, NOTE_CHARS)
        ));
    }
    let failures = failures(report);
    if !failures.is_empty() {
        doc.push(&format!(
            "<details><summary>{} that did not pass</summary>\n\n",
            tests_and_probes(&failures)
        ));
        for test in failures {
            doc.push(&failure_item(report, test));
        }
        doc.force("\n</details>\n\n");
    }
    if !report.flags.is_empty() {
        doc.push("**Neutralised files** (restored to the base version before grading):\n\n");
        for flag in &report.flags {
            doc.push(&format!(
                "- {}: {}\n",
                code(&flag.path, NOTE_CHARS),
                clean(&flag.reason, NOTE_CHARS)
            ));
        }
        doc.push("\n");
    }
}

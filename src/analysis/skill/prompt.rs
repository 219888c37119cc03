//! The parts of a task's public prompt that state its interfaces. Pure.

/// Headings (case-insensitive prefixes) of the sections that state what must be built: the
/// interface itself, its semantics, and the production constraints it must meet.
const STATED: &[&str] = &[
    "interface",
    "required behaviour",
    "required behavior",
    "semantics",
    "production constraints",
];

/// A Markdown heading outside code blocks: its level and title.
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|c| *c == '#').count();
    let rest = &line[level..];
    ((1..=6).contains(&level) && (rest.is_empty() || rest.starts_with(' ')))
        .then(|| (level, rest.trim()))
}

/// The prompt's sections stating interfaces, semantics and constraints, each with its
/// subsections, in prompt order and with every heading one level deeper (they go under a
/// heading of ours). A prompt without such a heading gives everything after its title.
pub fn stated_interfaces(prompt: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut fence: Option<&str> = None;
    // The level of the stated section being copied, if any.
    let mut copying: Option<usize> = None;
    for line in prompt.lines() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        if let Some(m) = marker {
            fence = match fence {
                Some(open) if open == m => None,
                Some(open) => Some(open),
                None => Some(m),
            };
        } else if fence.is_none()
            && let Some((level, title)) = heading(line)
        {
            if copying.is_some_and(|l| level <= l) {
                copying = None;
            }
            let lower = title.to_lowercase();
            if copying.is_none() && STATED.iter().any(|s| lower.starts_with(s)) {
                copying = Some(level);
            }
            if copying.is_some() {
                out.push(format!("#{line}"));
                continue;
            }
        }
        if copying.is_some() {
            out.push(line.to_owned());
        }
    }
    if out.is_empty() {
        return demote_after_title(prompt);
    }
    trim_blank(out.join("\n"))
}

fn demote_after_title(prompt: &str) -> String {
    let mut fence = false;
    let lines: Vec<String> = prompt
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .enumerate()
        .filter_map(|(i, line)| {
            let t = line.trim_start();
            if t.starts_with("```") || t.starts_with("~~~") {
                fence = !fence;
            }
            match heading(line) {
                Some((1, _)) if i == 0 => None,
                Some(_) if !fence => Some(format!("#{line}")),
                _ => Some(line.to_owned()),
            }
        })
        .collect();
    trim_blank(lines.join("\n"))
}

fn trim_blank(text: String) -> String {
    text.trim_matches('\n').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stated_sections_are_kept_with_their_subsections_and_demoted() {
        let prompt = "# Title\n\nIntro.\n\n## Interface\n\n### `pkg.mod`\n\n- `f(x)`\n\n\
                      ```python\n# not a heading\n```\n\n## Background\n\nWhy.\n\n\
                      ## Semantics of `f`\n\nf doubles.\n\n## Production constraints\n\nFast.\n";
        assert_eq!(
            stated_interfaces(prompt),
            "### Interface\n\n#### `pkg.mod`\n\n- `f(x)`\n\n```python\n# not a heading\n```\n\n\
             ### Semantics of `f`\n\nf doubles.\n\n### Production constraints\n\nFast."
        );
    }

    #[test]
    fn a_prompt_without_stated_sections_gives_everything_after_its_title() {
        assert_eq!(
            stated_interfaces("# Fix it\n\nDo this.\n\n## Details\n\n`g()` returns 1.\n"),
            "Do this.\n\n### Details\n\n`g()` returns 1."
        );
    }

    #[test]
    fn headings_inside_code_blocks_do_not_start_sections() {
        let prompt = "# T\n\n```\n## Interface\n```\n\n## Required behaviour\n\nx\n";
        assert_eq!(stated_interfaces(prompt), "### Required behaviour\n\nx");
    }
}

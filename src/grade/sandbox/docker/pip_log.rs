//! What an environment layer's `pip install` is doing, read from its output lines, and how it
//! is shown while the layer builds: a progress bar on a terminal, one plain line per step
//! otherwise, log events when logs are JSON. The parsing is pure.

use std::io::IsTerminal;

/// One step of an offline `pip install --no-index --find-links`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipStep {
    /// `Processing /wheels/<file>.whl`: one wheel (a requirement or a dependency) collected.
    Processing(String),
    /// `Installing collected packages: a, b, c`.
    Installing(usize),
    /// `Successfully installed …`.
    Installed,
}

/// The step a line of pip's output reports, if any.
pub fn step(line: &str) -> Option<PipStep> {
    let line = line.trim();
    if let Some(path) = line.strip_prefix("Processing ") {
        let file = path.trim().rsplit('/').next().unwrap_or(path).to_owned();
        return Some(PipStep::Processing(file));
    }
    if let Some(list) = line.strip_prefix("Installing collected packages:") {
        return Some(PipStep::Installing(
            list.split(',').filter(|p| !p.trim().is_empty()).count(),
        ));
    }
    line.starts_with("Successfully installed")
        .then_some(PipStep::Installed)
}

/// Requirement lines of a requirements file (what the bar starts from; dependencies add to it).
pub fn requirement_count(requirements: &str) -> usize {
    requirements
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty() && !l.starts_with('-'))
        .count()
}

/// Shows one layer's install as it goes.
pub struct PipProgress {
    tag: String,
    collected: u64,
    bar: Option<indicatif::ProgressBar>,
}

impl PipProgress {
    pub fn new(tag: &str, requirements: &str) -> PipProgress {
        let total = requirement_count(requirements) as u64;
        let bar =
            (std::io::stderr().is_terminal() && !crate::grade::terminal::json_logs()).then(|| {
                let bar = indicatif::ProgressBar::new(total.max(1));
                bar.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{spinner} {prefix} [{bar:30}] {pos}/{len} wheels {wide_msg}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                bar.set_prefix(tag.to_owned());
                bar.enable_steady_tick(std::time::Duration::from_millis(200));
                bar
            });
        PipProgress {
            tag: tag.to_owned(),
            collected: 0,
            bar,
        }
    }

    /// Feeds one line of pip's output.
    pub fn line(&mut self, line: &str) {
        let Some(step) = step(line) else { return };
        if let PipStep::Processing(_) = step {
            self.collected += 1;
        }
        let text = match &step {
            PipStep::Processing(file) => format!("processing {file}"),
            PipStep::Installing(n) => format!("installing {n} package(s)"),
            PipStep::Installed => "installed".to_owned(),
        };
        match &self.bar {
            Some(bar) => {
                if self.collected > bar.length().unwrap_or(0) {
                    bar.set_length(self.collected);
                }
                bar.set_position(self.collected);
                bar.set_message(text);
            }
            None if crate::grade::terminal::json_logs() => {
                tracing::info!(layer = %self.tag, step = %text, "environment layer build");
            }
            None => eprintln!("build {}: {text}", self.tag),
        }
    }

    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pip_lines_become_steps() {
        for (line, want) in [
            ("Looking in links: /infradev/wheels", None),
            (
                "Processing /infradev/wheels/jinja2-3.1.6-py3-none-any.whl",
                Some(PipStep::Processing("jinja2-3.1.6-py3-none-any.whl".into())),
            ),
            (
                "Installing collected packages: MarkupSafe, filelock, jinja2",
                Some(PipStep::Installing(3)),
            ),
            (
                "Successfully installed MarkupSafe-3.0.3 filelock-3.18.0",
                Some(PipStep::Installed),
            ),
            ("  Attempting uninstall: six", None),
            ("", None),
        ] {
            assert_eq!(step(line), want, "{line:?}");
        }
    }

    #[test]
    fn requirements_are_counted_without_comments_and_options() {
        let text = "# pinned\ntorch==2.8.0\nnumpy==1.26.4  # the layer's\n\n-c constraints.txt\n";
        assert_eq!(requirement_count(text), 2);
    }
}

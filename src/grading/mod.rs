//! Pure grading: evidence in, categories and a verdict out. No I/O anywhere below this module.

mod attempts;
mod classify;
mod evidence;
mod verdict;

pub use attempts::{MAX_RERUN, Retries, combine_attempts, needs_rerun, rerun_candidates};
pub use classify::classify;
pub use evidence::{
    BudgetBreach, BudgetKind, Category, Kill, Outcome, Phase, PhaseEvidence, TestEvidence,
};
pub use verdict::{CategoryCounts, Expectation, Grade, GradeCounts, GradedTest, Verdict, grade};

//! `holdout-reads`: how many times a run read its holdout, counted across processes and written
//! before each read, so that a session killed while reading it is counted too.

use std::path::Path;

use crate::Result;

/// Reads of the holdout recorded in `path` (0 when it does not exist).
pub fn reads(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.trim().parse().unwrap_or(0))
}

/// Records one more read (before it happens) and returns the count including it.
pub fn record_read(path: &Path) -> Result<usize> {
    let n = reads(path) + 1;
    contrai_base::write_atomic(path, n.to_string().as_bytes())?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_are_counted_across_calls() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("holdout-reads");
        assert_eq!(super::reads(&p), 0);
        assert_eq!(super::record_read(&p).unwrap(), 1);
        assert_eq!(super::record_read(&p).unwrap(), 2);
        assert_eq!(super::reads(&p), 2);
    }
}

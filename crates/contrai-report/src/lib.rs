//! Contrai's report: one self-contained HTML file with SVG plots of a run or of any log the
//! doctor reads. Filled in by the report issue.

//! Contrai's doctor: reads training logs of any framework and diagnoses them. Filled in by the doctor issue.

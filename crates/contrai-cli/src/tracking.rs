//! Runs where trackers keep them, named as their users name them: on an MLflow tracking server
//! by their id alone (`mlflow:ID`, MLflow's own `runs:/ID`), resolved against `--tracking-uri`,
//! else `MLFLOW_TRACKING_URI`, as MLflow's client does; a Trackio project by its name
//! (`trackio:PROJECT`), in Trackio's own folder.

use std::path::{Path, PathBuf};

use anyhow::bail;
use contrai_doctor::TrackingLocation;

/// The tracking server `mlflow:ID` arguments are on.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TrackingArgs {
    /// The MLflow tracking server (`http://HOST:PORT`) that `mlflow:RUN_ID`, `mlflow:EXPERIMENT`
    /// and `runs:/RUN_ID` arguments name a run or experiment of (`mlflow:` alone: every run).
    /// A full location needs none: `mlflow://HOST:PORT/RUN_ID`.
    #[arg(long, value_name = "URI", env = "MLFLOW_TRACKING_URI")]
    tracking_uri: Option<String>,
}

impl TrackingArgs {
    /// `paths` with each short form replaced by its location (`mlflow://...`, a Trackio database).
    pub fn resolve(&self, paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
        paths.iter().map(|p| self.resolve_one(p)).collect()
    }

    /// `path`, or the location its short form names.
    pub fn resolve_one(&self, path: &Path) -> anyhow::Result<PathBuf> {
        let Some(text) = path.to_str() else {
            return Ok(path.to_path_buf());
        };
        if let Some(project) = text.strip_prefix("trackio:") {
            return Ok(trackio_db(project, &|k| std::env::var_os(k)));
        }
        let id = match (text.strip_prefix("runs:/"), text.strip_prefix("mlflow:")) {
            (Some(run), _) => run.split('/').next().unwrap_or_default(),
            (None, Some(id)) if !id.starts_with("//") => id,
            _ => return Ok(path.to_path_buf()),
        };
        let Some(uri) = &self.tracking_uri else {
            bail!(
                "{text}: which tracking server? Pass --tracking-uri http://HOST:PORT, set \
                 MLFLOW_TRACKING_URI, or write the whole location: mlflow://HOST:PORT/{id}"
            );
        };
        // A local store (MLflow 3's default `sqlite:///mlflow.db`, or a file store) is read whole.
        if let Some(store) = uri
            .strip_prefix("sqlite:///")
            .or_else(|| uri.strip_prefix("file://"))
        {
            if !id.is_empty() {
                bail!(
                    "{text}: the tracking URI {uri} is a local store, read whole (every run in it): \
                     `contrai doctor mlflow:` or `contrai doctor {store}`"
                );
            }
            return Ok(PathBuf::from(store));
        }
        TrackingLocation::on(uri, id).map_err(|e| anyhow::anyhow!("{text}: {e}"))
    }
}

/// Where Trackio keeps a project's database: `$TRACKIO_DIR`, else `$HF_HOME/trackio`, else
/// `~/.cache/huggingface/trackio` (`$XDG_CACHE_HOME` honoured), named as Trackio names it (the
/// project's letters, digits, `-` and `_`; `default` when none).
fn trackio_db(project: &str, env: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    let dir = env("TRACKIO_DIR").map(PathBuf::from).unwrap_or_else(|| {
        let hf = env("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            let cache = (env("XDG_CACHE_HOME").map(PathBuf::from))
                .unwrap_or_else(|| PathBuf::from(env("HOME").unwrap_or_default()).join(".cache"));
            cache.join("huggingface")
        });
        hf.join("trackio")
    });
    let name: String = project
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_'))
        .collect();
    dir.join(format!("{}.db", if name.is_empty() { "default" } else { &name }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_forms_go_to_the_tracking_server() {
        let t = TrackingArgs {
            tracking_uri: Some("http://10.0.0.5:5000".into()),
        };
        let got = t
            .resolve(&[
                "mlflow:abc".into(),
                "runs:/0f/model".into(),
                "mlflow:".into(),
                "logs/x".into(),
            ])
            .unwrap();
        let want = [
            "mlflow://10.0.0.5:5000/abc",
            "mlflow://10.0.0.5:5000/0f",
            "mlflow://10.0.0.5:5000/",
            "logs/x",
        ];
        assert_eq!(got, want.map(PathBuf::from));
        let none = TrackingArgs::default()
            .resolve(&["mlflow:abc".into()])
            .unwrap_err();
        assert!(none.to_string().contains("MLFLOW_TRACKING_URI"), "{none}");
        let local = TrackingArgs {
            tracking_uri: Some("sqlite:////work/mlflow.db".into()),
        };
        assert_eq!(
            local.resolve(&["mlflow:".into()]).unwrap(),
            [PathBuf::from("/work/mlflow.db")]
        );
        assert!(
            local
                .resolve(&["mlflow:abc".into()])
                .unwrap_err()
                .to_string()
                .contains("read whole")
        );
        let full = TrackingArgs::default()
            .resolve(&["mlflow://h:1/abc".into()])
            .unwrap();
        assert_eq!(full, [PathBuf::from("mlflow://h:1/abc")]);
    }

    #[test]
    fn a_trackio_project_is_its_database() {
        let env = |k: &str| (k == "HOME").then(|| "/home/u".into());
        assert_eq!(
            trackio_db("my.model", &env),
            PathBuf::from("/home/u/.cache/huggingface/trackio/mymodel.db")
        );
        let env = |k: &str| (k == "TRACKIO_DIR").then(|| "/data/t".into());
        assert_eq!(trackio_db("...", &env), PathBuf::from("/data/t/default.db"));
    }
}

//! Loading a role's configuration: an optional TOML file, then `BULWARK_<KEY>` environment
//! variables (e.g. `BULWARK_LISTEN=0.0.0.0:27017`). Unknown keys in the file are rejected
//! by each config struct's `deny_unknown_fields`. The environment is shared by every
//! program a shell starts (our own scripts use `BULWARK_BIN`, `BULWARK_URI`...), so only
//! variables naming a key of this role's config are taken from it.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::Context;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub fn load<T: DeserializeOwned + Serialize + Default>(file: Option<&Path>) -> anyhow::Result<T> {
    load_with_env(file, std::env::vars())
}

fn load_with_env<T: DeserializeOwned + Serialize + Default>(
    file: Option<&Path>,
    env: impl Iterator<Item = (String, String)>,
) -> anyhow::Result<T> {
    let known: HashSet<String> = match toml::Value::try_from(T::default())? {
        toml::Value::Table(t) => t.keys().cloned().collect(),
        _ => HashSet::new(),
    };
    let overrides: HashMap<String, String> = env
        .filter_map(|(k, v)| {
            let key = k.strip_prefix("BULWARK_")?.to_ascii_lowercase();
            known
                .contains(&key)
                .then_some((format!("BULWARK_{}", key.to_ascii_uppercase()), v))
        })
        .collect();
    let mut builder = config::Config::builder();
    if let Some(path) = file {
        builder = builder.add_source(
            config::File::from(path)
                .format(config::FileFormat::Toml)
                .required(true),
        );
    }
    builder = builder.add_source(
        config::Environment::with_prefix("BULWARK")
            .try_parsing(true)
            .source(Some(overrides)),
    );
    let raw = builder.build().context("reading configuration")?;
    raw.try_deserialize().context("invalid configuration")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("bulwark-cfg-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn unknown_keys_in_the_file_are_rejected() {
        let path = write("unknown", "listen = \"127.0.0.1:1\"\nno_such_key = 3\n");
        let err =
            load_with_env::<router::RouterConfig>(Some(&path), std::iter::empty()).unwrap_err();
        assert!(format!("{err:#}").contains("no_such_key"), "{err:#}");
    }

    #[test]
    fn file_values_are_used_and_env_overrides_them() {
        let path = write("values", "listen = \"127.0.0.1:5555\"\ncache_mb = 64\n");
        let env = vec![
            ("BULWARK_CACHE_MB".to_string(), "128".to_string()),
            // Not a shard key: ignored, not an error (scripts export such variables).
            ("BULWARK_COMPAT_CACHE".to_string(), "/tmp/x".to_string()),
        ];
        let c: shard::ShardConfig = load_with_env(Some(&path), env.into_iter()).unwrap();
        assert_eq!(c.listen, "127.0.0.1:5555");
        assert_eq!(c.cache_mb, 128);
    }
}

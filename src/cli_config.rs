//! Loading a role's configuration: an optional TOML file, then `BULWARK_*` environment
//! variables (e.g. `BULWARK_LISTEN=0.0.0.0:27017`). Unknown keys are rejected by each
//! config struct's `deny_unknown_fields`.

use std::path::Path;

use anyhow::Context;
use serde::de::DeserializeOwned;

pub fn load<T: DeserializeOwned>(file: Option<&Path>) -> anyhow::Result<T> {
    let mut builder = config::Config::builder();
    if let Some(path) = file {
        builder = builder.add_source(
            config::File::from(path)
                .format(config::FileFormat::Toml)
                .required(true),
        );
    }
    builder = builder.add_source(config::Environment::with_prefix("BULWARK").try_parsing(true));
    let raw = builder.build().context("reading configuration")?;
    raw.try_deserialize().context("invalid configuration")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_rejected() {
        let dir = std::env::temp_dir().join(format!("bulwark-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("router.toml");
        std::fs::write(&path, "listen = \"127.0.0.1:1\"\nno_such_key = 3\n").unwrap();
        let err = load::<router::RouterConfig>(Some(&path)).unwrap_err();
        assert!(format!("{err:#}").contains("no_such_key"), "{err:#}");
    }

    #[test]
    fn file_values_are_used() {
        let dir = std::env::temp_dir().join(format!("bulwark-cfg2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("shard.toml");
        std::fs::write(&path, "listen = \"127.0.0.1:5555\"\ncache_mb = 64\n").unwrap();
        let c: shard::ShardConfig = load(Some(&path)).unwrap();
        assert_eq!(c.listen, "127.0.0.1:5555");
        assert_eq!(c.cache_mb, 64);
    }
}

//! Dynamic pools, as Boskos has them: a type whose resources steward names and creates itself,
//! keeping at least `min_count` and at most `max_count`, creating more (up to the max) while
//! acquires wait for the type, and deleting a resource once it outlived `lifespan` (when no one
//! holds it). A dynamic type with needs is also virtual (Mason builds each new one); without, a
//! new resource starts in the type's state as it is.
//!
//! Each dynamic type is an object of kind `DynamicPool`, named after the type, written only by
//! `Sync`. Its resources are named `<type>-<log index>-<n>`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{check_word, invalid, POOL_API_VERSION, POOL_KIND};
use crate::objects::resource::{ObjectKey, Resource, DEFAULT_NAMESPACE};
use crate::rejection::Rejection;

/// The kind of the objects that hold dynamic pool configs.
pub const DYNAMIC_KIND: &str = "DynamicPool";
/// Largest `max_count` of one dynamic type.
pub const DYNAMIC_COUNT_MAX: u32 = 1000;

/// One dynamic type's config (a Boskos `resources:` entry with `min-count`/`max-count`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DynamicPool {
    pub rtype: String,
    /// The state a new resource starts in (dirty, for Mason to build it).
    pub state: String,
    pub min_count: u32,
    pub max_count: u32,
    /// 0: forever. Else a resource is deleted this long after its creation, once unowned.
    #[serde(default)]
    pub lifespan_ms: u64,
    /// The type's expiries, for the resources it creates.
    #[serde(default)]
    pub expiry_ms: BTreeMap<String, u64>,
}

impl DynamicPool {
    /// The view of a `DynamicPool` object (`None` for any other kind).
    pub fn of(object: &Resource) -> Option<DynamicPool> {
        if object.kind != DYNAMIC_KIND {
            return None;
        }
        let spec = object.spec.to_value();
        let num = |f: &str| spec.get(f).and_then(Value::as_u64).unwrap_or(0);
        Some(DynamicPool {
            rtype: object.metadata.name.to_string(),
            state: spec
                .get("state")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            min_count: u32::try_from(num("minCount")).unwrap_or(0),
            max_count: u32::try_from(num("maxCount")).unwrap_or(0),
            lifespan_ms: num("lifespanMs"),
            expiry_ms: spec
                .get("expiryMs")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| v.as_u64().map(|ms| (k.clone(), ms)))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// A new `DynamicPool` object for it.
    pub fn object(&self) -> Resource {
        let mut o = Resource::new(
            POOL_API_VERSION,
            DYNAMIC_KIND,
            DEFAULT_NAMESPACE,
            &self.rtype,
        );
        let spec = json!({
            "state": self.state,
            "minCount": self.min_count,
            "maxCount": self.max_count,
            "lifespanMs": self.lifespan_ms,
            "expiryMs": self.expiry_ms,
        });
        o.spec = crate::objects::raw_json::RawJson::from_value(&spec);
        o
    }
}

/// The name of the `n`th resource a command at `log_index` creates for `rtype`.
pub fn dynamic_name(rtype: &str, log_index: u64, n: u32) -> String {
    format!("{rtype}-{log_index}-{n}")
}

/// The structural checks of a sync's dynamic pools (`static_types`: the types it lists by name).
pub(super) fn check_dynamic(
    pools: &[DynamicPool],
    static_types: &std::collections::BTreeSet<&str>,
) -> Result<(), Rejection> {
    let mut seen = std::collections::BTreeSet::new();
    for (i, p) in pools.iter().enumerate() {
        let f = format!("dynamic[{i}]");
        check_word(&format!("{f}.type"), &p.rtype)?;
        check_word(&format!("{f}.state"), &p.state)?;
        if !seen.insert(p.rtype.as_str()) {
            return Err(invalid(&f, format!("type {} is dynamic twice", p.rtype)));
        }
        if static_types.contains(p.rtype.as_str()) {
            return Err(invalid(
                &f,
                format!(
                    "type {} has named resources; a type is static or dynamic",
                    p.rtype
                ),
            ));
        }
        let sample = ObjectKey::new(POOL_KIND, DEFAULT_NAMESPACE, &dynamic_name(&p.rtype, 1, 0));
        if crate::objects::validate::validate_key(&sample).is_err() {
            return Err(invalid(
                &format!("{f}.type"),
                format!(
                    "{} cannot start resource names (lowercase letters, digits, '-' and '.')",
                    p.rtype
                ),
            ));
        }
        if p.max_count == 0 || p.min_count > p.max_count {
            return Err(invalid(
                &f,
                format!(
                    "min-count {} and max-count {}: need 0 <= min-count <= max-count and \
                     max-count >= 1",
                    p.min_count, p.max_count
                ),
            ));
        }
        if p.max_count > DYNAMIC_COUNT_MAX {
            return Err(Rejection::TooLarge {
                field: format!("{f}.max_count"),
                rule: format!(
                    "{} is more than DYNAMIC_COUNT_MAX = {DYNAMIC_COUNT_MAX}",
                    p.max_count
                ),
            });
        }
        for state in p.expiry_ms.keys() {
            check_word(&format!("{f}.expiry.state"), state)?;
        }
    }
    Ok(())
}

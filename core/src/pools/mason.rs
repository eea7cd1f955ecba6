//! Virtual resources, as Mason builds them (seed 002): a config names a virtual type, what one
//! needs (type -> count) and an opaque config for whoever constructs it. Steward runs Mason's
//! four threads as steps of the replicated pool, each atomic:
//!
//! - recycling: a virtual resource released (or reset) `dirty` gives its leased resources back
//!   `dirty` (for the janitor) and waits, held by `mason`, in state `fulfilling`;
//! - fulfilling: as soon as *all* it needs are `free`, it leases them in one step (Mason takes
//!   them one by one), lists them in its `leasedResources` user data, moves to `constructing`
//!   and gets a `MasonConstruct` object describing the work;
//! - constructing: the leader's Mason task submits the `construct` operation on that object; the
//!   scheduler dispatches it to a worker (`steward worker run --handles MasonConstruct:construct`);
//! - freeing: when the operation ends, the leader proposes `Constructed`: on success the response
//!   becomes the user data and the resource is `free`, its leased resources parked in a state
//!   named after it; on failure its needs go back `dirty` and it waits again.
//!
//! A virtual resource and its leased resources move together: acquiring, updating, releasing or
//! resetting it does the same to them in the same step, and they cannot be leased on their own.
//!
//! Configs are objects of kind `MasonConfig` (one per virtual type), written only by
//! `SyncVirtual`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{check_word, invalid, POOL_API_VERSION};
use crate::objects::resource::Resource;
use crate::rejection::Rejection;

/// The kind of the objects that hold virtual resource configs, named after their virtual type.
pub const VIRTUAL_CONFIG_KIND: &str = "MasonConfig";
/// The kind of the objects a construct operation works on, named after their virtual resource.
pub const CONSTRUCT_KIND: &str = "MasonConstruct";
/// The owner of virtual resources while steward fulfils and constructs them.
pub const MASON_OWNER: &str = "mason";
/// The state of a virtual resource waiting for its needs.
pub const FULFILLING: &str = "fulfilling";
/// The state of a virtual resource (and its needs) while its construct operation runs.
pub const CONSTRUCTING: &str = "constructing";
/// The user data entry listing a virtual resource's leased resources (a JSON list of names),
/// as Mason names it.
pub const LEASED_RESOURCES: &str = "leasedResources";
/// Most virtual types.
pub const VIRTUAL_CONFIGS_MAX: usize = 100;
/// Most resources one virtual resource may need, all types together.
pub const VIRTUAL_NEEDS_MAX: u32 = 100;
/// Largest opaque config content, in bytes (it travels in each construct operation's params).
pub const VIRTUAL_CONTENT_BYTES_MAX: usize = 16 * 1024;

/// One virtual type's config (Mason's `configs:` entries).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VirtualConfig {
    /// The virtual type.
    pub name: String,
    /// Physical type -> how many one virtual resource leases.
    pub needs: BTreeMap<String, u32>,
    /// The constructor's config: its type (Mason's converter name) and opaque content.
    pub config_type: String,
    pub content: String,
}

impl VirtualConfig {
    /// The view of a `MasonConfig` object (`None` for any other kind).
    pub fn of(object: &Resource) -> Option<VirtualConfig> {
        if object.kind != VIRTUAL_CONFIG_KIND {
            return None;
        }
        let spec = object.spec.to_value();
        let needs = spec
            .get("needs")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| {
                        let n = u32::try_from(v.as_u64()?).ok()?;
                        Some((k.clone(), n))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
        Some(VirtualConfig {
            name: object.metadata.name.to_string(),
            needs,
            config_type: text(spec.pointer("/config/type")),
            content: text(spec.pointer("/config/content")),
        })
    }

    /// Its object's spec, in Mason's words.
    pub fn spec(&self) -> Value {
        json!({
            "needs": self.needs,
            "config": {"type": self.config_type, "content": self.content},
        })
    }

    /// A new `MasonConfig` object for it.
    pub fn object(&self) -> Resource {
        let mut o = Resource::new(
            POOL_API_VERSION,
            VIRTUAL_CONFIG_KIND,
            crate::DEFAULT_NAMESPACE,
            &self.name,
        );
        o.spec = crate::objects::raw_json::RawJson::from_value(&self.spec());
        o
    }
}

/// The leased resources a virtual resource's user data lists (none if it lists none).
pub fn leased_of(user_data: &BTreeMap<String, String>) -> Vec<String> {
    user_data
        .get(LEASED_RESOURCES)
        .and_then(|text| serde_json::from_str::<Vec<String>>(text).ok())
        .unwrap_or_default()
}

/// The structural checks of a `SyncVirtual`.
pub(super) fn check_configs(configs: &[VirtualConfig]) -> Result<(), Rejection> {
    if configs.len() > VIRTUAL_CONFIGS_MAX {
        return Err(Rejection::TooLarge {
            field: "configs".to_string(),
            rule: format!(
                "{} configs, more than VIRTUAL_CONFIGS_MAX = {VIRTUAL_CONFIGS_MAX}",
                configs.len()
            ),
        });
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, c) in configs.iter().enumerate() {
        let f = format!("configs[{i}]");
        check_word(&format!("{f}.name"), &c.name)?;
        super::check_names(&format!("{f}.name"), std::slice::from_ref(&c.name))?;
        if !seen.insert(&c.name) {
            return Err(invalid(&f, format!("{} is named twice", c.name)));
        }
        if c.needs.is_empty() {
            return Err(invalid(&format!("{f}.needs"), "at least one type"));
        }
        let mut total: u32 = 0;
        for (rtype, n) in &c.needs {
            check_word(&format!("{f}.needs"), rtype)?;
            if *n == 0 {
                return Err(invalid(
                    &format!("{f}.needs[{rtype}]"),
                    "a count of at least 1",
                ));
            }
            if rtype == &c.name {
                return Err(invalid(
                    &format!("{f}.needs[{rtype}]"),
                    "a virtual type cannot need itself",
                ));
            }
            total = total.saturating_add(*n);
        }
        if total > VIRTUAL_NEEDS_MAX {
            return Err(Rejection::TooLarge {
                field: format!("{f}.needs"),
                rule: format!(
                    "{total} resources, more than VIRTUAL_NEEDS_MAX = {VIRTUAL_NEEDS_MAX}"
                ),
            });
        }
        if !c.config_type.is_empty() {
            check_word(&format!("{f}.config.type"), &c.config_type)?;
        }
        if c.content.len() > VIRTUAL_CONTENT_BYTES_MAX {
            return Err(Rejection::TooLarge {
                field: format!("{f}.config.content"),
                rule: format!(
                    "{} bytes, more than VIRTUAL_CONTENT_BYTES_MAX = {VIRTUAL_CONTENT_BYTES_MAX}",
                    c.content.len()
                ),
            });
        }
    }
    // A type is virtual or physical, not both: no config may need another virtual type.
    for (i, c) in configs.iter().enumerate() {
        if let Some(rtype) = c.needs.keys().find(|t| seen.contains(t)) {
            return Err(invalid(
                &format!("configs[{i}].needs[{rtype}]"),
                format!("{rtype} is itself virtual; needs are physical types"),
            ));
        }
    }
    Ok(())
}

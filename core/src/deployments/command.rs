//! The deployment command: one step of a deployment's life cycle, or a status report.

use serde::{Deserialize, Serialize};

use crate::deployments::{DeploymentAction, StatusLimits};
use crate::objects::resource::ObjectKey;

/// A deployment's life cycle step or status report (`Command::Deployments`), applied by
/// `deployments/apply.rs` to its status table and its mirror object (`key`, of kind
/// `DeploymentIntentGroup`) together.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeploymentCommand {
    pub key: ObjectKey,
    pub action: DeploymentAction,
    pub limits: StatusLimits,
}

//! The `Reservations` gRPC service: what is reserved on each node, read from the counters the
//! state machine keeps as objects change (`State::reservations`), after the read barrier the
//! request asks for. Reservations themselves are written through `Resources`.

use std::sync::Arc;

use tonic::{Request, Response as GrpcResponse, Status};

use crate::proto::v1::reservations_server::Reservations;
use crate::proto::v1::*;
use crate::server::node::Node;
use crate::server::resources::consistency;
use crate::state;

pub struct ReservationsService {
    node: Arc<Node>,
}

impl ReservationsService {
    pub fn new(node: Arc<Node>) -> Self {
        ReservationsService { node }
    }
}

fn units(u: &state::Units) -> ReservedUnits {
    ReservedUnits {
        cru: u.cru,
        mru: u.mru,
        hru: u.hru,
        sru: u.sru,
    }
}

fn node_info(node_id: &str, r: &state::NodeReservations) -> NodeReservations {
    NodeReservations {
        node_id: node_id.to_string(),
        workloads: r.workloads,
        workloads_by_kind: r
            .by_kind
            .iter()
            .map(|(kind, n)| (kind.to_string(), *n))
            .collect(),
        units: Some(units(&r.units)),
    }
}

/// The sum of `nodes` (saturating, like the counters).
fn total(nodes: &[NodeReservations]) -> NodeReservations {
    let mut sum = NodeReservations {
        units: Some(ReservedUnits::default()),
        ..NodeReservations::default()
    };
    for n in nodes {
        sum.workloads = sum.workloads.saturating_add(n.workloads);
        for (kind, count) in &n.workloads_by_kind {
            let entry = sum.workloads_by_kind.entry(kind.clone()).or_default();
            *entry = entry.saturating_add(*count);
        }
        if let (Some(s), Some(u)) = (sum.units.as_mut(), n.units.as_ref()) {
            s.cru = s.cru.saturating_add(u.cru);
            s.mru = s.mru.saturating_add(u.mru);
            s.hru = s.hru.saturating_add(u.hru);
            s.sru = s.sru.saturating_add(u.sru);
        }
    }
    sum
}

#[tonic::async_trait]
impl Reservations for ReservationsService {
    #[tracing::instrument(level = "debug", skip_all, fields(node_id = %request.get_ref().node_id))]
    async fn counters(
        &self,
        request: Request<ReservationCountersRequest>,
    ) -> Result<GrpcResponse<ReservationCountersReply>, Status> {
        let req = request.into_inner();
        self.node
            .read_barrier(consistency(req.consistency)?)
            .await?;
        let state = self.node.state();
        let index = state.reservations();
        let nodes: Vec<NodeReservations> = match req.node_id.as_str() {
            "" => index.nodes().map(|(id, r)| node_info(id, r)).collect(),
            id => index
                .node(id)
                .map(|r| node_info(id, r))
                .into_iter()
                .collect(),
        };
        Ok(GrpcResponse::new(ReservationCountersReply {
            total: Some(total(&nodes)),
            nodes,
            pending_decommission: u64::try_from(index.pending_len()).unwrap_or(u64::MAX),
            revision: state.revision(),
        }))
    }
}

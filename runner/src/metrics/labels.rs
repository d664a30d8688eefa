//! The label sets of the runner's metrics (`super::Metrics`): one struct
//! per combination, each field a label.

use prometheus_client::encoding::EncodeLabelSet;

/// `{topic}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabel {
    /// The topic.
    pub topic: String,
}

/// `{topic, thread}`: where an attempt ran.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ThreadLabels {
    /// The topic.
    pub topic: String,
    /// `runner` (the thread that claims and commits) or `pool`.
    pub thread: &'static str,
}

/// `{topic, version, outcome}`: how an attempt ended, on which handler version.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The topic.
    pub topic: String,
    /// The handler version (content hash) that ran it: only kept versions.
    pub version: String,
    /// `ack`, `retry`, `dead`, `released` or `cancelled`.
    pub outcome: &'static str,
}

/// `{topic, result}` of a rollout's verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutLabels {
    /// The topic.
    pub topic: String,
    /// `promoted`, `rolled_back` or `aborted` (by hand, or superseded by a
    /// newer version; also `pinned` and `unpinned`).
    pub result: &'static str,
}

/// `{topic, how}`: a durable handler's step, `recorded` (run, then written
/// to the journal) or `replayed` (returned from it without running).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    /// The topic.
    pub topic: String,
    /// `recorded` or `replayed`.
    pub how: &'static str,
}

/// `{topic, kind, how}`: effects of journaled attempts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EffectLabels {
    /// The topic.
    pub topic: String,
    /// `http`, `clock`, `random` or `follow_up`.
    pub kind: &'static str,
    /// `recorded` or `replayed`.
    pub how: &'static str,
}

/// `{topic, state}`: where a topic's jobs are.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// The topic.
    pub topic: String,
    /// `scheduled`, `ready`, `running` or `dead`.
    pub state: &'static str,
}

/// `{topic, key}`: one of a topic's top tenant keys, or `other` for the rest.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyLabels {
    /// The topic.
    pub topic: String,
    /// The key (`""` for jobs without one, `other` for the keys not listed).
    pub key: String,
}

/// `{topic, status}` of an outbound HTTP request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    /// The topic whose handler sent it.
    pub topic: String,
    /// The HTTP status, or `denied` (no grant) or `error` (no answer).
    pub status: String,
}

/// `{topic, version}`: the handler serving a topic.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabels {
    /// The topic.
    pub topic: String,
    /// The handler's content hash.
    pub version: String,
}

/// `{topic, version, role}`: a version a runner is told to serve and lacks.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MissingLabels {
    /// The topic.
    pub topic: String,
    /// The version's content hash.
    pub version: String,
    /// `stable`, `pinned` (nothing of the topic is claimed) or `canary`
    /// (the stable version serves every attempt here).
    pub role: &'static str,
}

/// `{result}` of a reload.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `handler_loaded`, `handler_rejected`, `handler_missing`,
    /// `config_applied` or `config_rejected`.
    pub result: &'static str,
}

/// `{topic, version, direction}` of outbound bytes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabels {
    /// The topic.
    pub topic: String,
    /// The handler's content hash.
    pub version: String,
    /// `out` (request bodies) or `in` (response bodies).
    pub direction: &'static str,
}

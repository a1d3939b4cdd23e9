//! One metric family as a collector builds it: name, help, unit and samples, written with
//! its `# HELP` and `# TYPE` lines by [`counters`] or [`gauges`] (nothing for a family
//! without samples).

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

pub(super) type Labels = Vec<(&'static str, String)>;

/// One metric family: its samples with their labels.
pub(super) struct Family<T> {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    samples: Vec<(Labels, T)>,
}

impl<T> Family<T> {
    pub(super) fn new(name: &'static str, help: &'static str) -> Self {
        Family {
            name,
            help,
            unit: None,
            samples: Vec::new(),
        }
    }

    pub(super) fn unit(mut self, unit: Unit) -> Self {
        self.unit = Some(unit);
        self
    }

    pub(super) fn add(&mut self, labels: Labels, value: T) {
        self.samples.push((labels, value));
    }

    /// A family of one sample without labels.
    pub(super) fn one(mut self, value: T) -> Self {
        self.samples.push((Vec::new(), value));
        self
    }

    /// A sample without labels, if there is a value.
    pub(super) fn one_if(mut self, value: Option<T>) -> Self {
        self.samples.extend(value.map(|v| (Vec::new(), v)));
        self
    }

    /// Labels for a family of one sample.
    pub(super) fn labelled(mut self, labels: Labels) -> Self {
        if let Some(s) = self.samples.last_mut() {
            s.0 = labels;
        }
        self
    }
}

/// Counters are monotonic totals; prometheus-client adds the `_total` suffix.
pub(super) fn counters<N>(encoder: &mut DescriptorEncoder, f: Family<N>) -> std::fmt::Result
where
    ConstCounter<N>: EncodeMetric + 'static,
{
    encode_family(encoder, f, MetricType::Counter, |v| {
        Box::new(ConstCounter::new(v))
    })
}

pub(super) fn gauges(encoder: &mut DescriptorEncoder, f: Family<f64>) -> std::fmt::Result {
    encode_family(encoder, f, MetricType::Gauge, |v| {
        Box::new(ConstGauge::new(v))
    })
}

fn encode_family<T>(
    encoder: &mut DescriptorEncoder,
    f: Family<T>,
    kind: MetricType,
    metric: impl Fn(T) -> Box<dyn EncodeMetric>,
) -> std::fmt::Result {
    if f.samples.is_empty() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(f.name, f.help, f.unit.as_ref(), kind)?;
    for (labels, value) in f.samples {
        let m = metric(value);
        if labels.is_empty() {
            m.encode(family.encode_family(&Vec::<(&str, String)>::new())?)?;
        } else {
            m.encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

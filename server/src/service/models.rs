//! The models as the APIs see them: listed, shown, loaded, unloaded, added
//! and removed (a pull, a delete), and the limits requests are held to.
//! Every error comes back as a [`ServiceError`], so each API answers it
//! from the one table.

use super::{Service, ServiceError};
use crate::engine::{KeepAlive, ModelInfo, NodeLoad, Readiness, RequestLimits};
use crate::model::ModelSpec;

impl Service {
    /// Whether some model can serve and no queue is full (`/ready`).
    pub fn readiness(&self) -> Readiness {
        self.engine.readiness()
    }

    /// Requests waiting in the models' queues.
    pub fn queued(&self) -> usize {
        self.engine.queued()
    }

    /// What this node is doing, for a balancer's agent check.
    pub fn node_load(&self) -> NodeLoad {
        self.engine.node_load()
    }

    /// Every model with its state.
    pub fn models(&self) -> Vec<ModelInfo> {
        self.engine.models()
    }

    /// One model with its state: `name`, or the default model.
    ///
    /// # Errors
    /// An unknown model (the message lists the models).
    pub fn model(&self, name: Option<&str>) -> Result<ModelInfo, ServiceError> {
        Ok(self.engine.model(name)?)
    }

    /// Loads a model (the default one when `None`) and waits until it is
    /// loaded; `keep_alive` sets how long it then stays idle. Returns its
    /// name.
    ///
    /// # Errors
    /// An unknown model, or a load that failed or did not finish in time.
    pub async fn load(
        &self,
        model: Option<&str>,
        keep_alive: Option<KeepAlive>,
    ) -> Result<String, ServiceError> {
        Ok(self.engine.load(model, keep_alive).await?)
    }

    /// Unloads a model once its current generation is over. Returns its
    /// name and whether it was loaded.
    ///
    /// # Errors
    /// An unknown model.
    pub async fn unload(&self, model: Option<&str>) -> Result<(String, bool), ServiceError> {
        Ok(self.engine.unload(model).await?)
    }

    /// Serves a model the store just brought.
    ///
    /// # Errors
    /// A model of that name with another file.
    pub fn add_model(&self, spec: ModelSpec) -> Result<(), ServiceError> {
        Ok(self.engine.add_model(spec)?)
    }

    /// Stops serving a model (the store deleted it), once its generation
    /// is over.
    ///
    /// # Errors
    /// An unknown model.
    pub async fn remove_model(&self, name: &str) -> Result<(), ServiceError> {
        Ok(self.engine.remove_model(name).await?)
    }

    /// The limits requests are checked against (`[limits]`).
    pub fn request_limits(&self) -> RequestLimits {
        self.engine.request_limits()
    }
}

//! Everything an object or the front Worker builds from its environment: settings, the
//! authorizer, the checkpoint sink, and the hooks an embedding Worker may install.

#[cfg(feature = "test-faults")]
use crate::edge::dev::faults::FaultPlan;
#[cfg(feature = "postgres")]
use crate::edge::store::postgres::Postgres;
use crate::edge::store::{Store, StoreCounters, D1};
use crate::engine::access::api::ApiError;
use crate::engine::access::auth::{Authorizer, JwtAuthorizer, JwtSecrets};
use crate::engine::durable::{Database, MappedSql, SqlExecutor, Tables, DEFAULT_DATABASE};
use crate::engine::host::config::{Backend, ConfigError, Settings};
use crate::engine::host::hook::EventHook;
use crate::engine::host::store::CheckpointSink;
use crate::engine::pump::Build;
use std::cell::RefCell;
use std::rc::Rc;
use worker::Env;

type SinkFactory = Rc<dyn Fn(&Env) -> Rc<dyn CheckpointSink>>;
/// Settings as built once per isolate, with whether a custom sink was installed then.
type BuiltSettings = (bool, Result<Rc<Settings>, ConfigError>);

thread_local! {
    static AUTHORIZER: RefCell<Option<Rc<dyn Authorizer>>> = const { RefCell::new(None) };
    static SINK: RefCell<Option<SinkFactory>> = const { RefCell::new(None) };
    static HOOK: RefCell<Option<Rc<dyn EventHook>>> = const { RefCell::new(None) };
    /// The settings and the secret's authorizer, built once per isolate: a Worker's vars and
    /// secrets do not change while its isolate lives, and parsing them (some twenty lookups
    /// across the JavaScript boundary and the COLUMNS JSON) on every request cost the front
    /// Worker about 4% of its CPU. A refusal is kept too: it answers every request alike.
    static SETTINGS: RefCell<Option<BuiltSettings>> = const { RefCell::new(None) };
    static SECRET_AUTHORIZER: RefCell<Option<Result<Rc<dyn Authorizer>, ConfigError>>> = const { RefCell::new(None) };
}

/// The service's settings (see `SETTINGS` above for why they are kept per isolate).
pub fn settings(env: &Env) -> Result<Rc<Settings>, ConfigError> {
    let custom_sink = custom_sink_installed();
    if let Some((built_with, settings)) = SETTINGS.with(|s| s.borrow().clone()) {
        if built_with == custom_sink {
            return settings;
        }
    }
    let build = if cfg!(feature = "dev") { Build::Development } else { Build::Production };
    let settings = Settings::from_vars(|name| var(env, name), custom_sink, build).map(Rc::new);
    SETTINGS.with(|s| *s.borrow_mut() = Some((custom_sink, settings.clone())));
    settings
}

/// The authorizer: the one an embedding Worker installed, else HS256 JWTs signed with
/// `STREAM_JWT_SECRET` (or, during a rotation, `STREAM_JWT_SECRET_PREVIOUS`), under the
/// settings' policy. Built once per isolate, so its cache of verified tokens serves every
/// request here.
pub fn authorizer(env: &Env, settings: &Settings) -> Result<Rc<dyn Authorizer>, ConfigError> {
    if let Some(installed) = AUTHORIZER.with(|a| a.borrow().clone()) {
        return Ok(installed);
    }
    if let Some(built) = SECRET_AUTHORIZER.with(|a| a.borrow().clone()) {
        return built;
    }
    let secret = |name| env.secret(name).map(|s| s.to_string()).or_else(|_| env.var(name).map(|s| s.to_string())).ok();
    let built = secret("STREAM_JWT_SECRET")
        .ok_or_else(|| invalid("STREAM_JWT_SECRET", "is not set (a secret: `wrangler secret put STREAM_JWT_SECRET`, or .dev.vars locally)"))
        .and_then(|current| {
            let previous = secret("STREAM_JWT_SECRET_PREVIOUS").filter(|p| !p.is_empty());
            let secrets =
                JwtSecrets { current: current.as_bytes(), previous: previous.as_deref().map(str::as_bytes), development: development(env) };
            JwtAuthorizer::with(secrets, settings.jwt.clone()).map_err(|e| invalid(e.name(), &e.to_string()))
        })
        .map(|a| Rc::new(a) as Rc<dyn Authorizer>);
    SECRET_AUTHORIZER.with(|a| *a.borrow_mut() = Some(built.clone()));
    built
}

/// A development deployment: the dev build with `DEV_MODE=1` (where the example secret of
/// `.dev.vars.example` is accepted). The production build is never one.
fn development(env: &Env) -> bool {
    #[cfg(feature = "dev")]
    return dev_mode(env);
    #[cfg(not(feature = "dev"))]
    {
        let _ = env;
        false
    }
}

/// Replaces the JWT authorizer for every stream (call from the embedding Worker's start
/// event). It runs before anything else touches a stream.
pub fn install_authorizer(authorizer: impl Authorizer + 'static) {
    AUTHORIZER.with(|a| *a.borrow_mut() = Some(Rc::new(authorizer)));
}

/// Replaces the mapped D1 tables with the app's own checkpoint sink (the "commit" mode, where
/// `RETAIN_CHARS` is honoured). The factory runs once per Durable Object.
pub fn install_checkpoint_sink(factory: impl Fn(&Env) -> Rc<dyn CheckpointSink> + 'static) {
    SINK.with(|s| *s.borrow_mut() = Some(Rc::new(factory)));
}

/// Installs a hook that receives every stream's notices (checkpoint failures, seal
/// shortfalls, readers dropped as stale, interrupted seals; see [`crate::engine::host::hook`], which
/// also says what a panicking hook does). Call from the embedding Worker's start event.
pub fn install_event_hook(hook: impl EventHook + 'static) {
    HOOK.with(|h| *h.borrow_mut() = Some(Rc::new(hook)));
}

pub fn custom_sink_installed() -> bool {
    SINK.with(|s| s.borrow().is_some())
}

/// A var's value: a string var as is, a JSON/TOML table var serialized back to JSON.
pub fn var(env: &Env, name: &str) -> Option<String> {
    if let Ok(v) = env.var(name) {
        return Some(v.to_string());
    }
    env.object_var::<serde_json::Value>(name).ok().map(|v| v.to_string())
}

/// `DEV_MODE=1`: a dev build's development switches are on (see the `dev` feature).
#[cfg(feature = "dev")]
pub fn dev_mode(env: &Env) -> bool {
    var(env, "DEV_MODE").as_deref() == Some("1")
}

/// What a Durable Object needs, built once per object (the settings and the authorizer are
/// shared by every object of the isolate).
pub struct Setup {
    pub settings: Rc<Settings>,
    pub authorizer: Rc<dyn Authorizer>,
    pub store: Rc<Store>,
    /// The executor of the mapped tables (`None` with a custom sink), for its counters.
    pub executor: Option<Executor>,
    pub hook: Option<Rc<dyn EventHook>>,
    #[cfg(feature = "test-faults")]
    pub faults: Option<Rc<FaultPlan>>,
}

impl Setup {
    /// What the object of answer `stream_id` needs: its store is on the database the id names
    /// (`DATABASES`, `engine::durable::databases`). A bad configuration is 500 `misconfigured`;
    /// an id naming a database that is not configured, 400 `unknown_database`.
    pub fn from_env(env: &Env, stream_id: &str) -> Result<Self, ApiError> {
        let settings = settings(env).map_err(ApiError::misconfigured)?;
        let database = settings.databases.of_id(stream_id).map_err(ApiError::unknown_database)?;
        Self::on_database(env, Rc::clone(&settings), database).map_err(ApiError::misconfigured)
    }

    fn on_database(env: &Env, settings: Rc<Settings>, database: Database<'_>) -> Result<Self, ConfigError> {
        let custom_sink = SINK.with(|s| s.borrow().clone());
        let authorizer = authorizer(env, &settings)?;
        #[cfg(feature = "test-faults")]
        let faults = fault_plan(env)?;
        #[cfg(not(feature = "test-faults"))]
        refuse_fault_plan(env)?;
        let (store, executor) = match custom_sink {
            Some(factory) => (Store::Sink(factory(env)), None),
            None => {
                let executor = Executor::from_env(env, settings.backend, database)?;
                let exec = executor.sql();
                #[cfg(feature = "test-faults")]
                let exec: Rc<dyn SqlExecutor> = match &faults {
                    Some(plan) => Rc::new(crate::edge::dev::faults::Faulty { inner: exec, plan: Rc::clone(plan) }),
                    None => exec,
                };
                let exec = modelled(env, &settings, database, exec)?;
                (Store::Tables(Tables::new(exec, MappedSql::new(settings.mapping.clone(), settings.backend.dialect()))), Some(executor))
            }
        };
        let hook = HOOK.with(|h| h.borrow().clone());
        Ok(Self {
            settings,
            authorizer,
            store: Rc::new(store),
            executor,
            hook,
            #[cfg(feature = "test-faults")]
            faults,
        })
    }
}

/// The mapped tables of the database `id` (a stream id, or a chat id) lives in, for a read the
/// front Worker or a chat's feed makes (no faults, no model); refused when chats are not mapped
/// (or an embedding Worker keeps its checkpoints in a sink of its own).
pub fn chat_tables(env: &Env, settings: &Settings, id: &str) -> Result<Tables, ApiError> {
    if settings.mapping.chat.is_none() || custom_sink_installed() {
        return Err(ApiError::no_chat_column());
    }
    let database = settings.databases.of_id(id).map_err(ApiError::unknown_database)?;
    Ok(Executor::from_env(env, settings.backend, database).map_err(ApiError::misconfigured)?.tables(settings))
}

/// Whether the rows carry the stream's format (a `/ui` of a finished stream reads it there): the
/// mapped tables with a format column.
pub fn rows_carry_format(settings: &Settings) -> bool {
    settings.mapping.format.is_some() && !custom_sink_installed()
}

impl Setup {
    /// The durable text of a stream, read for a request (`/text`, `/ui` from the row, `/watch`,
    /// a resume's refusal): an overload is waited out as a stream's own calls are.
    pub async fn read_durable(
        &self,
        stream_id: &str,
    ) -> Result<Option<crate::engine::text::reading::DurableText>, crate::engine::host::store::StoreError> {
        super::runtime::patiently(&self.settings.stream, || self.store.sink().read_durable(stream_id)).await
    }

    /// Sets the row's cancel flag (idempotent); `false` when there is no such row.
    pub async fn request_cancel(&self, stream_id: &str) -> Result<bool, crate::engine::host::store::StoreError> {
        super::runtime::patiently(&self.settings.stream, || self.store.sink().request_cancel(stream_id)).await
    }
}

/// The executor of the mapped tables on the configured backend, with its traffic counters.
#[derive(Clone)]
pub enum Executor {
    D1(Rc<D1>),
    #[cfg(feature = "postgres")]
    Postgres(Rc<Postgres>),
}

impl Executor {
    /// The executor of `database` on the backend, from its binding (`DB`, or `HYPERDRIVE`,
    /// without `DATABASES`); a missing binding, or a backend this build lacks, is a
    /// configuration error.
    pub fn from_env(env: &Env, backend: Backend, database: Database<'_>) -> Result<Self, ConfigError> {
        let missing = |what: &str, e: worker::Error| {
            let name = if database.name == DEFAULT_DATABASE { "DB" } else { "DATABASES" };
            invalid(name, &format!("the {what} binding {} of database {:?} is missing: {e}", database.binding, database.name))
        };
        match backend {
            Backend::D1 => {
                let db = env.d1(database.binding).map_err(|e| missing("D1", e))?;
                Ok(Executor::D1(Rc::new(D1::new(db))))
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                let hyperdrive = env.hyperdrive(database.binding).map_err(|e| missing("Hyperdrive", e))?;
                Ok(Executor::Postgres(Rc::new(Postgres::new(&hyperdrive))))
            }
            #[cfg(not(feature = "postgres"))]
            Backend::Postgres => Err(invalid(
                "DURABLE_BACKEND",
                "is \"postgres\", and this build has no Postgres backend (built without the `postgres` feature)",
            )),
        }
    }

    /// The mapped tables on this executor (no faults: the chat reads).
    pub fn tables(&self, settings: &Settings) -> Tables {
        Tables::new(self.sql(), MappedSql::new(settings.mapping.clone(), settings.backend.dialect()))
    }

    pub fn sql(&self) -> Rc<dyn SqlExecutor> {
        match self {
            Executor::D1(d1) => Rc::clone(d1) as _,
            #[cfg(feature = "postgres")]
            Executor::Postgres(pg) => Rc::clone(pg) as _,
        }
    }

    /// The backend's name (the key of its counters in `/stats`) and its traffic so far.
    pub fn counters(&self) -> (&'static str, StoreCounters) {
        match self {
            Executor::D1(d1) => ("d1", d1.counters()),
            #[cfg(feature = "postgres")]
            Executor::Postgres(pg) => ("postgres", pg.counters()),
        }
    }
}

/// The dev build's model of the database in front of `exec`, when `DB_MODEL_WRITE_MS` asks for
/// it (honoured only with `DEV_MODE=1`; docs/LOAD.md, "The model in the dev build").
#[cfg(feature = "dev")]
fn modelled(env: &Env, settings: &Settings, database: Database<'_>, exec: Rc<dyn SqlExecutor>) -> Result<Rc<dyn SqlExecutor>, ConfigError> {
    use crate::engine::durable::model::{Capacity, MODEL_VARS};
    let postgres = settings.backend == Backend::Postgres;
    let Some(capacity) = Capacity::from_vars(|name| var(env, name), postgres).map_err(|e| invalid(e.name, &e.to_string()))? else {
        return Ok(exec);
    };
    if !dev_mode(env) {
        return Err(invalid(MODEL_VARS[0], "is a development switch and is refused unless DEV_MODE=1"));
    }
    let models = env
        .durable_object(crate::edge::dev::model::BINDING)
        .map_err(|e| invalid(MODEL_VARS[0], &format!("needs the DB_MODEL Durable Object binding (scripts/dev-config.mjs adds it): {e}")))?;
    Ok(Rc::new(crate::edge::dev::model::Modelled { inner: exec, models, database: database.binding.to_owned(), capacity }))
}

/// A production build has no model of the database: its variables are refused, never ignored.
#[cfg(not(feature = "dev"))]
fn modelled(env: &Env, _: &Settings, _: Database<'_>, exec: Rc<dyn SqlExecutor>) -> Result<Rc<dyn SqlExecutor>, ConfigError> {
    use crate::engine::durable::model::MODEL_VARS;
    match MODEL_VARS.iter().find(|name| var(env, name).is_some_and(|v| !v.trim().is_empty())) {
        None => Ok(exec),
        Some(name) => Err(invalid(name, "is a development switch, and this build has none (built without the `dev` feature)")),
    }
}

/// The `TEST_FAULTS` plan of a test build, honoured only with `DEV_MODE=1`.
#[cfg(feature = "test-faults")]
pub(crate) fn fault_plan(env: &Env) -> Result<Option<Rc<FaultPlan>>, ConfigError> {
    match var(env, "TEST_FAULTS").filter(|s| !s.trim().is_empty()) {
        None => Ok(None),
        Some(_) if !dev_mode(env) => Err(invalid("TEST_FAULTS", "is a test switch and is refused unless DEV_MODE=1")),
        Some(spec) => Ok(Some(Rc::new(FaultPlan::parse(&spec).map_err(|e| invalid("TEST_FAULTS", &e.to_string()))?))),
    }
}

/// A production build has no fault injection: `TEST_FAULTS` is refused, never ignored.
#[cfg(not(feature = "test-faults"))]
fn refuse_fault_plan(env: &Env) -> Result<(), ConfigError> {
    match var(env, "TEST_FAULTS").filter(|s| !s.trim().is_empty()) {
        None => Ok(()),
        Some(_) => Err(invalid("TEST_FAULTS", "is a test switch, and this build has none (built without the `test-faults` feature)")),
    }
}

fn invalid(name: &'static str, reason: &str) -> ConfigError {
    ConfigError::Invalid { name, reason: reason.trim_start_matches(name).trim().to_owned() }
}

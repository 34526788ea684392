// kestrel._kestrel: the C++ engine as the pure-Python layer (kestrel/__init__.py) sees it.
// This module is thin on purpose: argument handling, defaults, output objects and
// documentation live in Python; here are the engine, its sessions and the error mapping.
//
// Errors (README "Python"): kestrel::Error raised while checking a request (sessions'
// constructors, SamplingParams.validate, encode, apply_chat_template) becomes ValueError,
// with the engine's message; raised anywhere else (loading a model, running a step) it
// stays a RuntimeError, as pybind11 maps std::runtime_error. The GIL is released while
// the engine loads or steps.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "async_session.h"
#include "batch_session.h"
#include "core/error.h"
#include "engine_handle.h"
#include "kestrel/llm.h"
#include "kestrel/worker.h"
#include "stream_session.h"
#include "structured/spec_fields.h"
#include "tokenizer/tokenizer.h"

namespace py = pybind11;

namespace kestrel::python {
namespace {

// Runs `f`, turning a kestrel::Error (a bad request or parameter) into ValueError.
template <typename F>
auto as_value_error(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw py::value_error(e.what());
  }
}

const Tokenizer& need_tokenizer(EngineHandle& h) {
  const Tokenizer* t = h.llm().tokenizer();
  if (t == nullptr) throw py::value_error("the model directory has no tokenizer.json");
  return *t;
}

// What vLLM's structured_outputs object asks for (JSON text that kestrel/sampling_params.py
// makes), read as the server reads its structured_outputs field, with `param` naming it in
// errors ("structured_outputs" or vLLM's older "guided_decoding"). Throws kestrel::Error.
// Unlike the server's field, an object that asks for nothing is an error, as in vLLM.
structured::NamedSpec read_structured_outputs(const std::string& json_text, const std::string& param) {
  std::optional<structured::NamedSpec> spec = structured::only_spec(
      structured::read_structured_outputs(nlohmann::ordered_json::parse(json_text), param));
  KS_CHECK(spec.has_value(), "'{}' asks for nothing: give one of json, regex, choice or json_object",
           param);
  return std::move(*spec);
}

void bind_config(py::module_& m) {
  py::class_<EngineConfig>(m, "EngineConfig")
      .def(py::init<>())
      .def_readwrite("device", &EngineConfig::device)
      .def_readwrite("max_num_seqs", &EngineConfig::max_num_seqs)
      .def_readwrite("max_num_batched_tokens", &EngineConfig::max_num_batched_tokens)
      .def_readwrite("max_model_len", &EngineConfig::max_model_len)
      .def_readwrite("block_size", &EngineConfig::block_size)
      .def_readwrite("num_kv_blocks", &EngineConfig::num_kv_blocks)
      .def_readwrite("kv_cache_memory_bytes", &EngineConfig::kv_cache_memory_bytes)
      .def_readwrite("gpu_memory_utilization", &EngineConfig::gpu_memory_utilization)
      .def_readwrite("kv_cache_dtype", &EngineConfig::kv_cache_dtype)
      .def_readwrite("enable_prefix_caching", &EngineConfig::enable_prefix_caching)
      .def_readwrite("enable_chunked_prefill", &EngineConfig::enable_chunked_prefill)
      .def_readwrite("num_threads", &EngineConfig::num_threads)
      .def_readwrite("enforce_eager", &EngineConfig::enforce_eager)
      .def_readwrite("async_scheduling", &EngineConfig::async_scheduling)
      .def_readwrite("seed", &EngineConfig::seed)
      .def_readwrite("chat_template", &EngineConfig::chat_template)
      .def_readwrite("tensor_parallel_size", &EngineConfig::tensor_parallel_size)
      .def_readwrite("tp_rendezvous", &EngineConfig::tp_rendezvous)
      .def_readwrite("tp_worker_command", &EngineConfig::tp_worker_command);

  py::class_<SamplingParams>(m, "SamplingParams")
      .def(py::init<>())
      .def_readwrite("temperature", &SamplingParams::temperature)
      .def_readwrite("top_k", &SamplingParams::top_k)
      .def_readwrite("top_p", &SamplingParams::top_p)
      .def_readwrite("min_p", &SamplingParams::min_p)
      .def_readwrite("seed", &SamplingParams::seed)
      .def_readwrite("max_tokens", &SamplingParams::max_tokens)
      .def_readwrite("min_tokens", &SamplingParams::min_tokens)
      .def_readwrite("ignore_eos", &SamplingParams::ignore_eos)
      .def_readwrite("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_readwrite("stop", &SamplingParams::stop)
      .def_readwrite("include_stop_str_in_output", &SamplingParams::include_stop_str_in_output)
      .def_readwrite("skip_special_tokens", &SamplingParams::skip_special_tokens)
      .def_readwrite("detokenize", &SamplingParams::detokenize)
      .def_readwrite("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_readwrite("presence_penalty", &SamplingParams::presence_penalty)
      .def_readwrite("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_readwrite("logit_bias", &SamplingParams::logit_bias)
      .def_readwrite("n", &SamplingParams::n)
      .def_readwrite("logprobs", &SamplingParams::logprobs)
      .def_readwrite("prompt_logprobs", &SamplingParams::prompt_logprobs)
      // Without a model the vocabulary is unknown: stop_token_ids are checked at generate.
      .def("validate", [](const SamplingParams& p, int vocab_size) {
        as_value_error([&] { p.validate(vocab_size); });
      }, py::arg("vocab_size") = INT_MAX);
  // The form only: the engine compiles the constraint at generate (Engine.constrain).
  m.def("check_structured_outputs", [](const std::string& json_text, const std::string& param) {
    as_value_error([&] { (void)read_structured_outputs(json_text, param); });
  }, py::arg("json_text"), py::arg("param"));
}

void bind_outputs(py::module_& m) {
  py::class_<TokenLogprobs>(m, "TokenLogprobs")
      .def_readonly("token_id", &TokenLogprobs::token_id)
      .def_readonly("logprob", &TokenLogprobs::logprob)
      .def_readonly("rank", &TokenLogprobs::rank)
      .def_readonly("top", &TokenLogprobs::top);
  py::class_<CompletionOutput>(m, "CompletionOutput")
      .def_readonly("index", &CompletionOutput::index)
      .def_readonly("token_ids", &CompletionOutput::token_ids)
      .def_readonly("text", &CompletionOutput::text)
      .def_readonly("finish_reason", &CompletionOutput::finish_reason)
      .def_readonly("stop_reason", &CompletionOutput::stop_reason)  // None, str or int
      .def_readonly("logprobs", &CompletionOutput::logprobs);
  py::class_<RequestOutput>(m, "RequestOutput")
      .def_readonly("request_id", &RequestOutput::request_id)
      .def_readonly("prompt_token_ids", &RequestOutput::prompt_token_ids)
      .def_readonly("outputs", &RequestOutput::outputs)
      .def_readonly("num_cached_tokens", &RequestOutput::num_cached_tokens)
      .def_readonly("prompt_logprobs", &RequestOutput::prompt_logprobs)
      .def_readonly("finished", &RequestOutput::finished)
      .def_readonly("error", &RequestOutput::error);
}

void bind_sessions(py::module_& m) {
  using Release = py::call_guard<py::gil_scoped_release>;
  py::class_<BatchSession>(m, "BatchSession")
      .def("step", &BatchSession::step, Release())
      .def("abort", &BatchSession::abort, Release())
      .def_property_readonly("done", &BatchSession::done)
      .def_property_readonly("num_prompts", &BatchSession::num_prompts)
      .def_property_readonly("prefill_tps", &BatchSession::prefill_tps)
      .def_property_readonly("decode_tps", &BatchSession::decode_tps);
  py::class_<StreamSession>(m, "StreamSession")
      .def("step", &StreamSession::step, Release())
      .def("abort", &StreamSession::abort, Release())
      .def_property_readonly("done", &StreamSession::done)
      .def_property_readonly("output", &StreamSession::output);
  py::class_<server::RequestUpdate>(m, "RequestUpdate")
      .def_readonly("key", &server::RequestUpdate::sub)
      .def_readonly("samples", &server::RequestUpdate::samples)  // deltas
      .def_readonly("error", &server::RequestUpdate::error)
      .def_readonly("refused", &server::RequestUpdate::refused)
      .def_readonly("prompt_logprobs", &server::RequestUpdate::prompt_logprobs)
      .def_readonly("num_cached_tokens", &server::RequestUpdate::num_cached_tokens);
  py::class_<AsyncSession>(m, "AsyncSession")
      .def("add", [](AsyncSession& s, int key, std::vector<int> prompt, const SamplingParams& params) {
        py::gil_scoped_release release;
        as_value_error([&] { s.add(key, std::move(prompt), params); });
      })
      .def("abort", &AsyncSession::abort, Release())
      .def("wait", &AsyncSession::wait, Release())
      .def("shutdown", &AsyncSession::shutdown, Release());
}

void bind_engine(py::module_& m) {
  py::class_<EngineHandle, std::shared_ptr<EngineHandle>>(m, "Engine")
      .def(py::init<const std::string&, const EngineConfig&>(), py::arg("model_dir"),
           py::arg("config"), py::call_guard<py::gil_scoped_release>())
      .def("start", [](std::shared_ptr<EngineHandle> h, const std::vector<std::vector<int>>& prompts,
                       const std::vector<SamplingParams>& params) {
        py::gil_scoped_release release;
        return as_value_error([&] { return std::make_unique<BatchSession>(h, prompts, params); });
      })
      .def("start_async", [](std::shared_ptr<EngineHandle> h) {
        py::gil_scoped_release release;
        return as_value_error([&] { return std::make_unique<AsyncSession>(h); });
      })
      .def("start_stream", [](std::shared_ptr<EngineHandle> h, const std::vector<int>& prompt,
                              const SamplingParams& params) {
        py::gil_scoped_release release;
        return as_value_error([&] { return std::make_unique<StreamSession>(h, prompt, params); });
      })
      .def_property_readonly("has_tokenizer",
                             [](EngineHandle& h) { return h.llm().tokenizer() != nullptr; })
      .def("encode", [](EngineHandle& h, const std::string& text, bool add_special_tokens) {
        return as_value_error([&] { return need_tokenizer(h).encode(text, add_special_tokens); });
      }, py::arg("text"), py::arg("add_special_tokens") = true)
      .def("decode", [](EngineHandle& h, const std::vector<int>& ids, bool skip_special_tokens) {
        // Token pieces may end inside a UTF-8 character: never fail on them.
        std::string s = need_tokenizer(h).decode(ids, skip_special_tokens);
        return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), s.size(), "replace"));
      }, py::arg("token_ids"), py::arg("skip_special_tokens") = true)
      // Messages and extra variables come as JSON text: Python's json module already turns
      // any JSON-able value into it, and the template wants JSON values.
      .def("apply_chat_template", [](EngineHandle& h, const std::string& messages_json,
                                     bool add_generation_prompt, const std::string& extra_json,
                                     bool continue_final_message, const std::string& chat_template) {
        return as_value_error([&] {
          return h.llm().apply_chat_template(nlohmann::ordered_json::parse(messages_json),
                                             add_generation_prompt,
                                             nlohmann::ordered_json::parse(extra_json),
                                             continue_final_message, chat_template);
        });
      }, py::arg("messages_json"), py::arg("add_generation_prompt"), py::arg("extra_json"),
         py::arg("continue_final_message") = false, py::arg("chat_template") = "")
      // Sets params.constraint to what the structured_outputs object asks for, compiled
      // over this model's vocabulary (the GIL is free meanwhile: a schema may take a while).
      .def("constrain", [](EngineHandle& h, SamplingParams& params, const std::string& json_text,
                           const std::string& param) {
        py::gil_scoped_release release;
        as_value_error([&] {
          params.constraint = structured::compile_spec(h.grammars(), read_structured_outputs(json_text, param));
        });
      }, py::arg("params"), py::arg("json_text"), py::arg("param"))
      .def("default_sampling_params", [](EngineHandle& h) { return h.llm().default_sampling_params(); })
      .def_property_readonly("vocab_size", [](EngineHandle& h) { return h.llm().vocab_size(); })
      .def_property_readonly("max_model_len", [](EngineHandle& h) { return h.llm().max_model_len(); })
      .def_property_readonly("device", [](EngineHandle& h) { return h.llm().device(); });
}

}  // namespace
}  // namespace kestrel::python

PYBIND11_MODULE(_kestrel, m) {
  m.doc() = "kestrel's C++ engine; use the `kestrel` package instead";
  kestrel::python::bind_config(m);
  kestrel::python::bind_outputs(m);
  kestrel::python::bind_sessions(m);
  kestrel::python::bind_engine(m);
  // A tensor-parallel rank this package started (kestrel/_worker.py): `args` stands for the
  // argv the C++ hook expects. Runs the rank to its end; None when this is no such process.
  m.def(
      "run_worker_if_spawned",
      [](std::vector<std::string> args) -> std::optional<int> {
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        py::gil_scoped_release release;
        return kestrel::run_worker_if_spawned(static_cast<int>(argv.size()), argv.data());
      },
      py::arg("args"));
  // The CLI's default: loading a model logs its sizes at info, which a script's output
  // should not carry unasked.
  spdlog::set_level(spdlog::level::warn);
  m.def("set_log_level", [](const std::string& level) {
    spdlog::set_level(spdlog::level::from_str(level));
  }, py::arg("level"), "trace, debug, info, warn, error or off");
}

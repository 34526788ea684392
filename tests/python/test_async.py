"""AsyncLLM: many requests at once from asyncio give what each gives alone (LLM.generate on
the same engine, its batch path), streamed outputs grow into the final one, and leaving
early, abort() and shutdown() end requests without hanging anything."""

import asyncio

import pytest

from kestrel import SamplingParams

CPU = dict(device="cpu", kv_cache_memory_bytes=64 << 20, max_num_seqs=8, max_model_len=512)
LONG = SamplingParams(temperature=1.0, seed=1, max_tokens=400, ignore_eos=True)


@pytest.fixture
def engine(text_model):
    from kestrel import AsyncLLM
    with AsyncLLM(text_model, **CPU) as e:
        yield e


async def collect(engine, prompt, params, request_id=None):
    return [out async for out in engine.generate(prompt, params, request_id)]


def test_concurrent_requests_equal_each_alone(engine):
    prompts = [f"Story number {i}:" for i in range(12)]
    params = [SamplingParams(temperature=1.0, seed=100 + i, max_tokens=6 + i, ignore_eos=True,
                             logprobs=2 if i % 3 == 0 else None, n=2 if i % 4 == 1 else 1)
              for i in range(12)]

    async def main():
        return await asyncio.gather(*(collect(engine, p, sp, f"r{i}")
                                      for i, (p, sp) in enumerate(zip(prompts, params))))
    streams = asyncio.run(main())
    tokenizer = engine.get_tokenizer()
    for i, outs in enumerate(streams):
        final = outs[-1]
        assert final.finished and not any(o.finished for o in outs[:-1])
        assert final.request_id == f"r{i}" and final.prompt == prompts[i]
        assert final.prompt_token_ids == tokenizer.encode(prompts[i])
        for o in outs:  # each output is the start of the final one
            for a, b in zip(o.outputs, final.outputs):
                assert b.text.startswith(a.text) and b.token_ids[:len(a.token_ids)] == a.token_ids
        assert [(c.finish_reason, len(c.token_ids)) for c in final.outputs] == [("length", 6 + i)] * params[i].n
    # The batch path on the same model, once the async engine has given it back.
    engine.shutdown()
    alone = engine._llm.generate(prompts, params, use_tqdm=False)
    for outs, expected in zip(streams, alone):
        got = outs[-1].outputs
        assert [c.token_ids for c in got] == [c.token_ids for c in expected.outputs]
        assert [c.text for c in got] == [c.text for c in expected.outputs]
        # Logprobs: the same positions and sampled tokens; values within float noise, since
        # a batch of other rows may round the products differently on the CPU.
        for c, e in zip(got, expected.outputs):
            assert (c.logprobs is None) == (e.logprobs is None)
            for position, (lp, ep, token) in enumerate(zip(c.logprobs or [], e.logprobs or [], e.token_ids)):
                assert token in lp and lp[token].logprob == pytest.approx(ep[token].logprob, abs=1e-3), position
            assert len(c.logprobs or []) == len(e.logprobs or [])


def test_leaving_early_aborts_and_others_go_on(engine):
    async def main():
        gen = engine.generate("Once", LONG, "long")
        first = await gen.__anext__()
        await gen.aclose()  # the request is aborted here
        short = await collect(engine, "Hi", SamplingParams(max_tokens=3, ignore_eos=True))
        again = await collect(engine, "Once", LONG, "long")
        return first, short[-1], again[-1]
    first, short, again = asyncio.run(asyncio.wait_for(main(), 120))
    assert not first.finished and short.finished and len(short.outputs[0].token_ids) == 3
    assert again.outputs[0].finish_reason == "length"  # the request_id is free again


def test_abort_ends_the_request(engine):
    async def main():
        outs = []
        async for out in engine.generate("Once", LONG, "victim"):
            outs.append(out)
            if len(outs) == 2:
                await engine.abort("victim")
        return outs
    outs = asyncio.run(asyncio.wait_for(main(), 60))
    assert outs[-1].finished and outs[-1].outputs[0].finish_reason == "abort"
    assert len(outs[-1].outputs[0].token_ids) < 400


def test_cancelled_task_aborts(engine):
    async def main():
        task = asyncio.ensure_future(collect(engine, "Once", LONG))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await collect(engine, "Hi", SamplingParams(max_tokens=2, ignore_eos=True))
    assert asyncio.run(asyncio.wait_for(main(), 60))[-1].finished


def test_bad_requests_are_value_errors(engine):
    async def main():
        with pytest.raises(ValueError, match="512"):  # past max_model_len: the engine refuses
            await collect(engine, list(range(1, 600)), SamplingParams(max_tokens=4))
        with pytest.raises(ValueError, match="temperature"):
            await collect(engine, "Hi", SamplingParams(temperature=-1.0))
        with pytest.raises(TypeError, match="sampling_params"):
            await collect(engine, "Hi", {"max_tokens": 3})
        gen = engine.generate("Once", LONG, "twice")
        await gen.__anext__()
        with pytest.raises(ValueError, match="already running"):
            await collect(engine, "Hi", SamplingParams(max_tokens=2), "twice")
        await gen.aclose()
        return await collect(engine, "Hi", SamplingParams(max_tokens=2, ignore_eos=True))
    assert asyncio.run(asyncio.wait_for(main(), 60))[-1].finished


def test_shutdown_ends_running_requests_and_frees_the_engine(engine):
    async def main():
        gen = engine.generate("Once", LONG, "running")
        await gen.__anext__()
        engine.shutdown()
        rest = [out async for out in gen]
        with pytest.raises(RuntimeError, match="shut down"):
            await collect(engine, "Hi", SamplingParams(max_tokens=2))
        return rest
    rest = asyncio.run(asyncio.wait_for(main(), 60))
    assert rest[-1].finished and rest[-1].outputs[0].finish_reason == "abort"
    assert engine._llm.generate(["Hi"], SamplingParams(max_tokens=2), use_tqdm=False)[0].finished

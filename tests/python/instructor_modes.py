"""Run by test_structured_clients.py with .venv-instructor's Python (instructor
cannot be installed beside the openai of .venv): asks the server at argv[1]
for a pydantic model in each of instructor's TOOLS and JSON_SCHEMA modes, with
a plain prompt and one that makes the mock echo an instance, and prints one
JSON line per mode and prompt with what it got back."""

import json
import sys
from typing import Literal

import instructor
import openai
from pydantic import BaseModel, Field


class Weather(BaseModel):
    city: str = Field(min_length=1, max_length=40)
    unit: Literal["celsius", "fahrenheit"]
    days: int = Field(ge=1, le=7)


PROMPT = "The weather in Lyon for three days"
# A prompt that makes the mock echo an instance: its values must come back.
ECHOED = PROMPT + ' @mock(echo=1) {"city": "Lyon", "unit": "celsius", "days": 3}'


def main() -> None:
    base = sys.argv[1]
    modes = (instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA)
    for mode, prompt in [(mode, prompt) for mode in modes for prompt in (PROMPT, ECHOED)]:
        client = instructor.from_openai(openai.OpenAI(base_url=f"{base}/v1", api_key="unused"), mode=mode)
        # No retries: an answer that fails its model must fail the run.
        weather, completion = client.chat.completions.create_with_completion(
            model="mock",
            response_model=Weather,
            max_retries=0,
            messages=[{"role": "user", "content": prompt}],
        )
        request = completion.choices[0]
        print(json.dumps({
            "mode": mode.value,
            "echo": prompt == ECHOED,
            "weather": weather.model_dump(),
            "finish_reason": request.finish_reason,
            "tool_calls": len(request.message.tool_calls or []),
        }), flush=True)


if __name__ == "__main__":
    main()

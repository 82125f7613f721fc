"""The memory operations of the protocol: sessions, the brief, tasks, decisions.

A mixin of `control.ops.dispatcher.Dispatcher` (which provides ``memory`` and
``engine``); each method takes the agent and the request model and returns the
result dict, raising the memory model's and the engine's exceptions.
"""

from __future__ import annotations

from typing import Any

from control.protocol import memory as pm
from memfs.memory import brief
from memfs.memory.model import Memory
from memfs.memory.records import duration
from memfs.store.engine import Engine
from memfs.store.errors import PermissionDenied


class MemoryRequests:
    engine: Engine
    memory: Memory

    def _session_start(self, agent: str, request: pm.SessionStartRequest) -> dict[str, Any]:
        return self.memory.session_start(agent, request.store, request.goal)

    def _session_checkpoint(self, agent: str, request: pm.SessionCheckpointRequest
                            ) -> dict[str, Any]:
        return self.memory.session_checkpoint(agent, request.store, request.session,
                                              request.note)

    def _session_handoff(self, agent: str, request: pm.SessionHandoffRequest
                         ) -> dict[str, Any]:
        return self.memory.session_handoff(agent, request.store, request.session,
                                           request.summary, request.next)

    def _session_list(self, agent: str, request: pm.SessionListRequest) -> dict[str, Any]:
        return {"sessions": self.memory.session_list(agent, request.store, owner=request.agent,
                                                     state=request.state, limit=request.limit)}

    def _session_show(self, agent: str, request: pm.SessionShowRequest) -> dict[str, Any]:
        return self.memory.session_show(agent, request.store, request.session)

    def _brief(self, agent: str, request: pm.BriefRequest) -> dict[str, Any]:
        return brief.build(self.memory, agent, request.store, max_bytes=request.max_bytes)

    def _task_add(self, agent: str, request: pm.TaskAddRequest) -> dict[str, Any]:
        return self.memory.task_add(agent, request.store, request.task, request.title,
                                    request.body)

    def _task_list(self, agent: str, request: pm.TaskListRequest) -> dict[str, Any]:
        return {"tasks": self.memory.task_list(agent, request.store, request.status)}

    def _task_show(self, agent: str, request: pm.TaskShowRequest) -> dict[str, Any]:
        return self.memory.task_show(agent, request.store, request.task)

    def _task_claim(self, agent: str, request: pm.TaskClaimRequest) -> dict[str, Any]:
        return self.memory.task_claim(agent, request.store, request.task,
                                      ttl=duration(request.ttl), session=request.session)

    def _task_checkpoint(self, agent: str, request: pm.TaskCheckpointRequest
                         ) -> dict[str, Any]:
        return self.memory.task_checkpoint(agent, request.store, request.task, request.note)

    def _task_complete(self, agent: str, request: pm.TaskCompleteRequest) -> dict[str, Any]:
        return self.memory.task_complete(agent, request.store, request.task, request.note)

    def _release(self, agent: str, request: pm.TaskReleaseRequest, delegate: bool
                 ) -> dict[str, Any]:
        if request.force and not delegate and self.engine.config.personal is None:
            raise PermissionDenied("only a delegate may release another agent's lease (force)")
        return self.memory.task_release(agent, request.store, request.task,
                                        force=request.force)

    def _decision_record(self, agent: str, request: pm.DecisionRecordRequest
                         ) -> dict[str, Any]:
        return self.memory.decision_record(
            agent, request.store, title=request.title, decision=request.decision,
            reason=request.reason, context=request.context, consequences=request.consequences,
            supersedes=request.supersedes)

    def _decision_list(self, agent: str, request: pm.DecisionListRequest) -> dict[str, Any]:
        return {"decisions": self.memory.decision_list(agent, request.store, request.status)}

    def _decision_show(self, agent: str, request: pm.DecisionShowRequest) -> dict[str, Any]:
        return self.memory.decision_show(agent, request.store, request.decision)

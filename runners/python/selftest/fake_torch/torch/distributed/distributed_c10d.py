"""Fake collectives: they do nothing but look like torch.distributed's signatures."""

__all__ = ["all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
           "reduce_scatter_tensor", "broadcast", "reduce", "gather", "scatter", "all_to_all",
           "all_to_all_single", "send", "recv", "isend", "irecv", "barrier"]


def all_reduce(tensor, op=None, group=None, async_op=False): pass
def all_gather(tensor_list, tensor, group=None, async_op=False): pass
def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False): pass
def reduce_scatter(output, input_list, op=None, group=None, async_op=False): pass
def reduce_scatter_tensor(output, input, op=None, group=None, async_op=False): pass
def broadcast(tensor, src, group=None, async_op=False): pass
def reduce(tensor, dst, op=None, group=None, async_op=False): pass
def gather(tensor, gather_list=None, dst=0, group=None, async_op=False): pass
def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False): pass
def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False): pass
def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False): pass
def send(tensor, dst, group=None, tag=0): pass
def recv(tensor, src=None, group=None, tag=0): pass
def isend(tensor, dst, group=None, tag=0): pass
def irecv(tensor, src=None, group=None, tag=0): pass


def barrier(group=None, async_op=False, device_ids=None):
    # A collective built on another one: counted once, as the outer call.
    all_reduce(_Scalar())


def all_gather_object(object_list, obj, group=None):
    # Not wrapped itself; counted through the all_gather it makes (module global lookup).
    all_gather([_Scalar()], _Scalar())


class _Scalar:
    def numel(self):
        return 1

    def element_size(self):
        return 8

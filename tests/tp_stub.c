/*
 * tp_stub.c - a transport plug-in for the tests of kvsd's loader
 * (daemon/net/loader.c): the socket transport's calls under another name,
 * so that a job runs through a loaded plug-in whatever is installed; and,
 * as TP_STUB asks, the ways a plug-in goes wrong: "version" (built for
 * another ops version), "short" (a call missing), "open" (open fails),
 * "none" (the entry gives no table). With TP_STUB_SAYS=FILE it creates
 * FILE when loaded, for a test to see that it was.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tp_util.h"
#include "tp_socket.h"

static struct kvs_transport_ops stub;

static int stub_open_fails(struct kvs_transport **out, struct kvs_transport_error *e)
{
    (void)out;
    return tp_fail(e, -ENODEV, "the stub's device is unplugged");
}

__attribute__((visibility("default"))) const struct kvs_transport_ops *kvs_transport_entry(void)
{
    const char *how = getenv("TP_STUB"), *says = getenv("TP_STUB_SAYS");
    int fd;

    if (says && (fd = open(says, O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) >= 0)
        close(fd);
    stub = kvs__tp_socket;
    stub.name = "stub";
    if (!how)
        return &stub;
    if (strcmp(how, "version") == 0)
        stub.version = KVS_TRANSPORT_VERSION + 1;
    else if (strcmp(how, "short") == 0)
        stub.wake = NULL;
    else if (strcmp(how, "open") == 0)
        stub.open = stub_open_fails;
    else if (strcmp(how, "none") == 0)
        return NULL;
    return &stub;
}

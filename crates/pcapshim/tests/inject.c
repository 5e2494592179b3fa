/* A libpcap program for the injection test of libringcap_pcap.so: reads the
 * frames of FILE with libpcap's own offline reader (a handle the library
 * passes through to the system's libpcap, in the same process as a live
 * one) and sends each with pcap_sendpacket on a live handle of IFACE,
 * 2 ms apart. Prints one line per frame: "I sent" or "I refused MESSAGE".
 *   usage: inject IFACE FILE */
#include <pcap/pcap.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    char err[PCAP_ERRBUF_SIZE];
    struct pcap_pkthdr *h;
    const u_char *d;
    if (argc != 3) return 1;
    pcap_t *in = pcap_open_offline(argv[2], err);
    if (!in) { fprintf(stderr, "offline: %s\n", err); return 1; }
    pcap_t *out = pcap_open_live(argv[1], 128, 0, 100, err);
    if (!out) { fprintf(stderr, "live: %s\n", err); return 1; }
    if (pcap_datalink(in) != DLT_EN10MB || pcap_file(in) == NULL || pcap_file(out) != NULL) {
        fprintf(stderr, "handles mixed up\n"); return 1;
    }
    int i = 0, r;
    while ((r = pcap_next_ex(in, &h, &d)) == 1) {
        if (pcap_sendpacket(out, d, (int)h->caplen) == 0)
            printf("%d sent\n", i);
        else
            printf("%d refused %s\n", i, pcap_geterr(out));
        i++;
        usleep(2000);
    }
    if (r != PCAP_ERROR_BREAK) { fprintf(stderr, "offline read: %d %s\n", r, pcap_geterr(in)); return 1; }
    pcap_close(in);
    pcap_close(out);
    return 0;
}

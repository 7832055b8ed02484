/* SPDX-License-Identifier: MIT */
/* The concurrent loop behind docs/findings.md (not built with the project):
 * N threads, each with its own buffer, stream and memory, uploading or
 * downloading BYTES back to back for SECS; aggregate and slowest thread's
 * GB/s. PSX_CHUNK=BYTES gives every buffer a fixed engine profile of that
 * chunk; PINSTAGE_CPUS=N caps the CPUs the pool counts as usable.
 *
 *   cc -O2 -Iinclude concurrent-loop.c -Lbuild -lpinstage -lpthread -o concurrent-loop
 *   concurrent-loop N BYTES h2d|d2h SECS */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "pinstage.h"
static double now_s(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static size_t bytes; static int d2h; static double secs; static pthread_barrier_t bar;
typedef struct{long n; double cpu;} res;
static void*run(void*a){res*r=a; pinstage_context_init(0); CUstream st; pinstage_stream_create(&st,PINSTAGE_STREAM_NON_BLOCKING);
  pinstage_buffer*b; pinstage_buffer_create(&b);
  if(getenv("PSX_CHUNK")){ pinstage_profile*f; pinstage_profile_fixed(&f,PINSTAGE_ROUTE_ENGINE,strtoull(getenv("PSX_CHUNK"),0,0),0); pinstage_buffer_set_profile(b,f); pinstage_profile_free(f);} unsigned char*h=malloc(bytes); memset(h,3,bytes);
  pinstage_devbuf*dv; pinstage_devbuf_alloc_u8(&dv,bytes);
  for(int i=0;i<10;i++){ if(d2h) pinstage_buffer_download(b,h,bytes,dv,st); else pinstage_buffer_upload(b,dv,h,bytes,st);}
  pthread_barrier_wait(&bar); double end=now_s()+secs; long n=0;
  while(now_s()<end){ pinstage_status e= d2h? pinstage_buffer_download(b,h,bytes,dv,st): pinstage_buffer_upload(b,dv,h,bytes,st); if(e){fprintf(stderr,"err %s\n",pinstage_last_error_message()); exit(1);} n++;}
  r->n=n; pinstage_stats s; pinstage_buffer_stats(b,&s); r->cpu=(double)s.engine_transfers/(s.engine_transfers+s.pageable_transfers+1e-9);
  return 0;}
int main(int argc,char**argv){ int nt=atoi(argv[1]); bytes=strtoull(argv[2],0,0); d2h=!strcmp(argv[3],"d2h"); secs=argc>4?atof(argv[4]):1.0;
  pinstage_context_init(0);
  pthread_t t[64]; res r[64]; pthread_barrier_init(&bar,0,nt);
  for(int i=0;i<nt;i++) pthread_create(&t[i],0,run,&r[i]);
  long tot=0, mn=1L<<60; double eng=0;
  for(int i=0;i<nt;i++){pthread_join(t[i],0); tot+=r[i].n; if(r[i].n<mn) mn=r[i].n; eng+=r[i].cpu;}
  printf("%d threads %s %zu: aggregate %.1f GB/s, slowest thread %.2f GB/s, mean %.2f, engine share %.2f\n",nt,argv[3],bytes,
    tot*(double)bytes/secs/1e9, mn*(double)bytes/secs/1e9, tot*(double)bytes/secs/1e9/nt, eng/nt);
  return 0;}

/* SPDX-License-Identifier: MIT */
/* The paced loop behind docs/findings.md's "Workers asleep through a frame's
 * gap" (not built with the project): each call after IDLE_US of sleep and a
 * pageable copy of other memory (OTHER 1), as a frame loop calls it; first
 * the same number of calls back to back. Prints both medians; with
 * PINSTAGE_TRACE=FILE the engine's timeline goes to FILE (arrivals.py reads
 * it); PSX_SPIN=US sets the pool's spin (pinstage_pool_set_spin_us).
 *
 *   cc -O2 -Iinclude paced-loop.c -Lbuild -lpinstage -o paced-loop
 *   paced-loop BYTES h2d|d2h IDLE_US OTHER REPS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "pinstage.h"
static double now_us(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return (x>y)-(x<y);}
int main(int argc,char**argv){
  size_t bytes=argc>1?strtoull(argv[1],0,0):4915200; int d2h=argc>2&&!strcmp(argv[2],"d2h");
  double idle=argc>3?atof(argv[3]):5000; int other=argc>4?atoi(argv[4]):1; int reps=argc>5?atoi(argv[5]):30;
  pinstage_context_init(0); if(getenv("PSX_SPIN")) pinstage_pool_set_spin_us(atoi(getenv("PSX_SPIN"))); CUstream st; pinstage_stream_create(&st,PINSTAGE_STREAM_NON_BLOCKING);
  pinstage_buffer*b; pinstage_buffer_create(&b);
  unsigned char*h=malloc(bytes),*o=malloc(bytes); memset(h,1,bytes); memset(o,2,bytes);
  pinstage_devbuf*dv,*dvo; pinstage_devbuf_alloc_u8(&dv,bytes); pinstage_devbuf_alloc_u8(&dvo,bytes);
  for(int i=0;i<20;i++){ if(d2h) pinstage_buffer_download(b,h,bytes,dv,st); else pinstage_buffer_upload(b,dv,h,bytes,st);}
  double *t=calloc(reps,sizeof(double)),*w=calloc(reps,sizeof(double));
  for(int i=0;i<reps;i++){ double a=now_us(); if(d2h) pinstage_buffer_download(b,h,bytes,dv,st); else pinstage_buffer_upload(b,dv,h,bytes,st); w[i]=now_us()-a;}
  for(int i=0;i<reps;i++){
    struct timespec ts={0,(long)(idle*1000)}; if(idle>0) nanosleep(&ts,0);
    if(other){ if(d2h) pinstage_devbuf_copy_to_host(dvo,o,bytes); else pinstage_devbuf_copy_from_host(dvo,o,bytes);}
    double a=now_us(); pinstage_status s= d2h? pinstage_buffer_download(b,h,bytes,dv,st): pinstage_buffer_upload(b,dv,h,bytes,st);
    t[i]=now_us()-a; if(s){fprintf(stderr,"err %s\n",pinstage_last_error_message());return 1;}
  }
  pinstage_stats s; pinstage_buffer_stats(b,&s);
  qsort(t,reps,sizeof(double),cmp); qsort(w,reps,sizeof(double),cmp);
  printf("%s %zu idle %.0f other %d: warm median %.1f  paced median %.1f min %.1f max %.1f  engine %llu pageable %llu\n",
    d2h?"d2h":"h2d",bytes,idle,other,w[reps/2],t[reps/2],t[0],t[reps-1],(unsigned long long)s.engine_transfers,(unsigned long long)s.pageable_transfers);
  return 0;
}
